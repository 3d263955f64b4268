package s3

import (
	"errors"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

var (
	// ErrContention means a write lost the race for its key to other
	// writers on every one of its attempts (Options.MaxAttempts): each
	// conditional PUT found the object changed since it was read (HTTP 412
	// or 409). Nothing was written by the call. The caller may retry.
	ErrContention = errors.New("s3: too much contention on the key")

	// ErrCorrupt means an object under the store's prefix is not one the
	// store wrote: no fencekit header, or metadata that disagrees with it.
	// The store refuses to read or overwrite it.
	ErrCorrupt = errors.New("s3: object is not a fencekit object")
)

// httpStatus returns the HTTP status code of an S3 error, or 0.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// lostRace reports whether a conditional PUT was refused because the object
// changed since it was read: 412 Precondition Failed (the ETag no longer
// matches, or If-None-Match: * found an object), 409 Conflict (S3's
// ConditionalRequestConflict: a concurrent write to the key was in
// progress), or 404 (If-Match on an object that someone deleted). In each
// case the server wrote nothing, so reading again and deciding again is
// safe.
func lostRace(err error) bool {
	switch httpStatus(err) {
	case http.StatusPreconditionFailed, http.StatusConflict, http.StatusNotFound:
		return true
	}
	return false
}

// notFound reports whether a read found no object.
func notFound(err error) bool { return httpStatus(err) == http.StatusNotFound }
