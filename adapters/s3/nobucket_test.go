package s3_test

import (
	"errors"
	"net/http"
	"testing"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestMissingBucket: a Store on a bucket that does not exist (a typo in
// its name) fails every call with an error matching ErrNoBucket, at its
// first request (a GET, whose 404 carries the code NoSuchBucket), instead of counting the PUT's 404 as a lost
// race (ErrContention after Options.MaxAttempts rounds) or reading the
// bucket as empty (ErrNotFound with fence 0).
func TestMissingBucket(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	c := newCounter()
	s := fences3.NewStore(srv.Client(func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: c} }),
		srv.Bucket+"-no-such-bucket", &fences3.Options{Prefix: testkit.Namespace(t) + "/"})
	calls := []struct {
		what string
		do   func() error
		want string // the requests it may make
	}{
		{"Put", func() error { return s.Put(ctx, "k", 5, []byte("v")) }, "GET(range)=1"},
		{"Delete", func() error { return s.Delete(ctx, "k", 5) }, "GET(range)=1"},
		{"Advance", func() error { return s.Advance(ctx, "k", 5) }, "GET=1"},
		{"Get", func() error { _, err := s.Get(ctx, "k"); return err }, "GET=1"},
	}
	for _, call := range calls {
		err := call.do()
		if !errors.Is(err, fences3.ErrNoBucket) {
			t.Errorf("%s on a missing bucket: %v; want an error matching ErrNoBucket", call.what, err)
		}
		for _, wrong := range []error{fences3.ErrContention, fence.ErrNotFound, fence.ErrStale, fence.ErrInvalid} {
			if errors.Is(err, wrong) {
				t.Errorf("%s on a missing bucket: %v matches %v", call.what, err, wrong)
			}
		}
		if got := c.take(); got != call.want {
			t.Errorf("%s on a missing bucket sent %s; want %s", call.what, got, call.want)
		}
	}
}
