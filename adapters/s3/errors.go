package s3

import (
	"errors"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

var (
	// ErrContention means a write lost the race for its key to other
	// writers on every one of its attempts (Options.MaxAttempts): each
	// conditional PUT found the object changed since it was read (HTTP 412
	// or 409). Nothing was written by the call. The caller may retry.
	ErrContention = errors.New("s3: too much contention on the key")

	// ErrCorrupt means an object under the store's prefix is not one the
	// store wrote: no fencekit header (an empty object included), or a
	// hashed name whose header names another key. The store refuses to read
	// or overwrite it.
	ErrCorrupt = errors.New("s3: object is not a fencekit object")

	// ErrNoBucket means the store's bucket does not exist (S3 error code
	// NoSuchBucket): a wrong bucket name, or a bucket deleted under the
	// store. It is permanent; nothing was written.
	ErrNoBucket = errors.New("s3: no such bucket")

	// ErrUnsafeServer means Store.VerifyServer found that the server does
	// not honour the conditional writes the store's fencing rests on: it
	// ignored If-Match or If-None-Match: *, refused a condition that holds,
	// or kept an object's ETag through a change of its body. The error's
	// text names the step that failed. Writes through the store on such a
	// server could replace a higher fence, or never succeed.
	ErrUnsafeServer = errors.New("s3: the server does not honour conditional writes as the store needs")
)

// httpStatus returns the HTTP status code of an S3 error, or 0.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// noBucket reports whether S3 refused a request because the bucket does not
// exist: error code NoSuchBucket, which S3 sends with its 404 to every
// request that carries a body (GET, PUT), unlike NoSuchKey. Every read the
// store makes is a GET, so a write learns of a missing bucket from its
// first request.
func noBucket(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket"
}

// lostRace reports whether a conditional PUT was refused because the object
// changed since it was read: 412 Precondition Failed (the ETag no longer
// matches, or If-None-Match: * found an object), 409 Conflict (S3's
// ConditionalRequestConflict: a concurrent write to the key was in
// progress), or a 404 other than NoSuchBucket (If-Match on an object that
// someone deleted). In each case the server wrote nothing, so reading again
// and deciding again is safe.
func lostRace(err error) bool {
	switch httpStatus(err) {
	case http.StatusPreconditionFailed, http.StatusConflict:
		return true
	case http.StatusNotFound:
		return !noBucket(err)
	}
	return false
}

// notFound reports whether a read found no object in an existing bucket.
func notFound(err error) bool { return httpStatus(err) == http.StatusNotFound && !noBucket(err) }
