package s3_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// objectsUnder lists the object names under prefix on the shared server.
func objectsUnder(t *testing.T, srv *s3server.Server, prefix string) []string {
	t.Helper()
	out, err := srv.Client().ListObjectsV2(testkit.Context(t), &awss3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range out.Contents {
		names = append(names, aws.ToString(o.Key))
	}
	return names
}

// TestVerifyServerPasses: on the test server (versitygw or gofakes3)
// VerifyServer finds nothing wrong, with the requests docs/s3.md lists, and
// leaves no object behind.
func TestVerifyServerPasses(t *testing.T) {
	srv := s3server.Shared(t)
	prefix := testkit.Namespace(t) + "/"
	c := newCounter()
	s := fences3.NewStore(srv.Client(func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: c} }),
		srv.Bucket, &fences3.Options{Prefix: prefix})
	if err := s.VerifyServer(testkit.Context(t)); err != nil {
		t.Fatalf("%s: %v", srv.Name, err)
	}
	if got, want := c.take(), "GET(range)=2 PUT=4 DELETE=1"; got != want {
		t.Errorf("VerifyServer sent %s; want %s", got, want)
	}
	if left := objectsUnder(t, srv, prefix); len(left) != 0 {
		t.Fatalf("VerifyServer left %v", left)
	}
}

// ignoringIfMatch is a server that honours If-None-Match but ignores
// If-Match.
type ignoringIfMatch struct{ fences3.API }

func (i ignoringIfMatch) PutObject(ctx context.Context, in *awss3.PutObjectInput, opts ...func(*awss3.Options)) (*awss3.PutObjectOutput, error) {
	c := *in
	c.IfMatch = nil
	return i.API.PutObject(ctx, &c, opts...)
}

// stuckETag is a server (or a cache in front of it) whose GET answers
// with the ETag an object had when it was first read, whatever its body
// is now.
type stuckETag struct {
	fences3.API
	mu    sync.Mutex
	first map[string]*string
}

func (s *stuckETag) GetObject(ctx context.Context, in *awss3.GetObjectInput, opts ...func(*awss3.Options)) (*awss3.GetObjectOutput, error) {
	out, err := s.API.GetObject(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := aws.ToString(in.Key)
	if e, ok := s.first[key]; ok {
		out.ETag = e
	} else {
		s.first[key] = out.ETag
	}
	return out, nil
}

// TestVerifyServerCatchesUnsafeServers: VerifyServer fails with
// ErrUnsafeServer, naming the step, on a server that drops both
// conditions (the rig of TestSuiteCatchesUnconditionalWrites), on one that
// ignores If-Match alone, and on one whose ETag does not change with the
// body; and it deletes its probe object each time.
func TestVerifyServerCatchesUnsafeServers(t *testing.T) {
	srv := s3server.Shared(t)
	for _, c := range []struct {
		name string
		api  fences3.API
		want string // in the error's text
	}{
		{"ConditionsIgnored", ignoring{srv.Client()}, "If-None-Match: * on an existing object"},
		{"IfMatchIgnored", ignoringIfMatch{srv.Client()}, "If-Match on the ETag"},
		{"ETagUnchanged", &stuckETag{API: srv.Client(), first: map[string]*string{}}, "kept its ETag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := testkit.Namespace(t) + "/"
			err := fences3.NewStore(c.api, srv.Bucket, &fences3.Options{Prefix: prefix}).VerifyServer(testkit.Context(t))
			if !errors.Is(err, fences3.ErrUnsafeServer) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("VerifyServer: %v; want ErrUnsafeServer saying %q", err, c.want)
			}
			t.Logf("caught: %v", err)
			if left := objectsUnder(t, srv, prefix); len(left) != 0 {
				t.Fatalf("VerifyServer left %v", left)
			}
		})
	}
}

// TestVerifyServerOtherErrors: a missing bucket is ErrNoBucket and a bad
// configuration fence.ErrInvalid, not ErrUnsafeServer: the server was not
// judged.
func TestVerifyServerOtherErrors(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	err := fences3.NewStore(srv.Client(), srv.Bucket+"-no-such-bucket", nil).VerifyServer(ctx)
	if !errors.Is(err, fences3.ErrNoBucket) || errors.Is(err, fences3.ErrUnsafeServer) {
		t.Errorf("VerifyServer on a missing bucket: %v; want ErrNoBucket only", err)
	}
	err = fences3.NewStore(srv.Client(), "", nil).VerifyServer(ctx)
	if !errors.Is(err, fence.ErrInvalid) || errors.Is(err, fences3.ErrUnsafeServer) {
		t.Errorf("VerifyServer with no bucket name: %v; want fence.ErrInvalid only", err)
	}
}
