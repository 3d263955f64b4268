package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// verifyDir is where VerifyServer writes its probe objects, under the
// store's prefix: apart from "k/" and "h/", so a probe never meets a key.
const verifyDir = "verify/"

// VerifyServer checks that the server honours the conditional writes the
// store's fencing rests on, with a probe object of its own under the
// store's prefix (Prefix + "verify/" + a random name), which it deletes
// afterwards. In order, the server must:
//
//   - create the probe with If-None-Match: *;
//   - refuse a second PUT with If-None-Match: * now that it exists;
//   - accept a PUT with If-Match on the ETag its own GET returned;
//   - give the object a new ETag after that PUT changed the body;
//   - refuse a PUT with If-Match on the replaced version's ETag.
//
// A server that fails one of these (one that ignores the conditional
// headers, for instance) lets stale writes through or refuses every write;
// the error then matches ErrUnsafeServer and says which step failed. Any
// other error (network, permissions, ErrNoBucket) is returned as it is.
// Call it once at startup, before the store's first write: a server that
// passes can still be unsafe in ways one client cannot see (a condition
// checked apart from the write, under concurrency), which the conformance
// suite and docs/s3.md cover. It needs s3:DeleteObject on the prefix, for
// the cleanup, besides what the store needs.
func (s *Store) VerifyServer(ctx context.Context) (err error) {
	if s.err != nil {
		return s.err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	name := s.prefix + verifyDir + hex.EncodeToString(id[:])
	created := false
	defer func() {
		if !created {
			return
		}
		// Clean up even when ctx has ended, within a bound of its own.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, derr := s.client.DeleteObject(dctx, &awss3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(name)}); derr != nil {
			err = errors.Join(err, fmt.Errorf("s3: verify: deleting the probe object %q: %w", name, derr))
		}
	}()
	unsafe := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s (bucket %q, probe object %q)", ErrUnsafeServer, fmt.Sprintf(format, args...), s.bucket, name)
	}
	put := func(body string, cond func(*awss3.PutObjectInput)) error {
		in := &awss3.PutObjectInput{
			Bucket: aws.String(s.bucket), Key: aws.String(name),
			Body: strings.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
			ContentType: aws.String("application/octet-stream"),
		}
		cond(in)
		_, err := s.client.PutObject(ctx, in, noResend)
		return err
	}
	ifNoneMatch := func(in *awss3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }
	ifMatch := func(etag string) func(*awss3.PutObjectInput) {
		return func(in *awss3.PutObjectInput) { in.IfMatch = aws.String(etag) }
	}
	// refused reports whether a PUT that must fail was refused as a
	// condition that does not hold; other errors end the check.
	refused := func(err error) (bool, error) {
		switch {
		case err == nil:
			return false, nil
		case noBucket(err):
			return false, s.noBucketError("verify", name, err)
		case lostRace(err):
			return true, nil
		}
		return false, fmt.Errorf("s3: verify: %w", err)
	}

	if err := put("fencekit verify 1\n", ifNoneMatch); err != nil {
		if noBucket(err) {
			return s.noBucketError("verify", name, err)
		}
		if httpStatus(err) == http.StatusNotImplemented || lostRace(err) {
			return unsafe("the server refused a PUT with If-None-Match: * creating a new object: %v", err)
		}
		return fmt.Errorf("s3: verify: creating the probe object %q: %w", name, err)
	}
	created = true
	first, err := s.probeETag(ctx, name, "fencekit verify 1\n")
	if err != nil {
		return err
	}

	if ok, err := refused(put("fencekit verify 2\n", ifNoneMatch)); err != nil {
		return err
	} else if !ok {
		return unsafe("the server accepted a PUT with If-None-Match: * on an existing object")
	}

	if err := put("fencekit verify 3\n", ifMatch(first)); err != nil {
		if lostRace(err) || httpStatus(err) == http.StatusNotImplemented {
			return unsafe("the server refused a PUT with If-Match on the ETag %s its own GET had just returned: %v", first, err)
		}
		return fmt.Errorf("s3: verify: %w", err)
	}
	second, err := s.probeETag(ctx, name, "fencekit verify 3\n")
	if err != nil {
		return err
	}
	if second == first {
		return unsafe("the object kept its ETag %s through a PUT that changed its body", first)
	}

	if ok, err := refused(put("fencekit verify 4\n", ifMatch(first))); err != nil {
		return err
	} else if !ok {
		return unsafe("the server accepted a PUT with If-Match on the ETag %s of a version it had replaced (now %s)", first, second)
	}
	return nil
}

// probeETag reads the probe object at name with a ranged GET, as a write
// reads its header, checks that it holds want, and returns its ETag.
func (s *Store) probeETag(ctx context.Context, name, want string) (string, error) {
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(name),
		Range: aws.String(fmt.Sprintf("bytes=0-%d", len(want)-1)),
	})
	if err != nil {
		return "", fmt.Errorf("s3: verify: reading the probe object %q: %w", name, err)
	}
	defer out.Body.Close()
	got, err := io.ReadAll(io.LimitReader(out.Body, int64(len(want))))
	if err != nil {
		return "", fmt.Errorf("s3: verify: reading the probe object %q: %w", name, err)
	}
	if string(got) != want {
		return "", fmt.Errorf("%w: a GET right after a successful PUT returned %q, not the %q written (probe object %q)", ErrUnsafeServer, got, want, name)
	}
	if aws.ToString(out.ETag) == "" {
		return "", fmt.Errorf("%w: the server sent no ETag, which conditional writes need (probe object %q)", ErrUnsafeServer, name)
	}
	return *out.ETag, nil
}
