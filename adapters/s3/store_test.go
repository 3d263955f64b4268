package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
)

// counter is an http.RoundTripper that counts requests by method.
type counter struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func newCounter() *counter {
	return &counter{base: http.DefaultTransport.(*http.Transport).Clone(), n: map[string]int{}}
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	m := req.Method
	if m == http.MethodGet && req.Header.Get("Range") != "" {
		m = "GET(range)"
	}
	c.mu.Lock()
	c.n[m]++
	c.mu.Unlock()
	return c.base.RoundTrip(req)
}

// take returns the counts since the last take, as "GET(range)=1 PUT=1".
func (c *counter) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, m := range []string{"HEAD", "GET(range)", "GET", "PUT", "POST", "DELETE"} {
		if c.n[m] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", m, c.n[m]))
		}
	}
	c.n = map[string]int{}
	return strings.Join(parts, " ")
}

// TestRequestsPerOperation pins the requests each call makes, as
// docs/s3.md lists them: a write's read is one ranged GET (no HEAD), Get
// and Advance read with one whole GET.
func TestRequestsPerOperation(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	c := newCounter()
	s := fences3.NewStore(srv.Client(func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: c} }),
		srv.Bucket, &fences3.Options{Prefix: testkit.Namespace(t) + "/"})
	steps := []struct {
		what string
		do   func() error
		want string
	}{
		{"Put on a new key", func() error { return s.Put(ctx, "k", 5, []byte("v")) }, "GET(range)=1 PUT=1"},
		{"Put on an existing key", func() error { return s.Put(ctx, "k", 6, []byte("w")) }, "GET(range)=1 PUT=1"},
		{"stale Put", func() error { return ignoreStale(s.Put(ctx, "k", 1, []byte("x"))) }, "GET(range)=1"},
		{"Get", func() error { _, err := s.Get(ctx, "k"); return err }, "GET=1"},
		{"Advance", func() error { return s.Advance(ctx, "k", 7) }, "GET=1 PUT=1"},
		{"Advance at the same fence", func() error { return s.Advance(ctx, "k", 7) }, "GET=1"},
		{"Delete", func() error { return s.Delete(ctx, "k", 7) }, "GET(range)=1 PUT=1"},
		{"Delete of the same tombstone", func() error { return s.Delete(ctx, "k", 7) }, "GET(range)=1"},
		{"Get of a tombstone", func() error { return ignoreNotFound(s.Get(ctx, "k")) }, "GET=1"},
		{"Get of a missing key", func() error { return ignoreNotFound(s.Get(ctx, "nothing")) }, "GET=1"},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		if got := c.take(); got != st.want {
			t.Errorf("%s: %s; want %s", st.what, got, st.want)
		}
	}
}

func ignoreStale(err error) error {
	if errors.Is(err, fence.ErrStale) {
		return nil
	}
	return fmt.Errorf("want stale, got %v", err)
}

func ignoreNotFound(_ fence.Record, err error) error {
	if errors.Is(err, fence.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("want not found, got %v", err)
}

// TestEveryWriteChangesTheETag: the object's ETag changes with the fence
// alone (Advance over the same value, a Put of the same value with a higher
// token), which is what makes If-Match a comparison of the whole state.
// On the same server, a server-side copy that only replaces the metadata
// keeps the ETag: a store that kept the fence in metadata alone, or that
// advanced with CopyObject, would let a stale writer's If-Match through.
func TestEveryWriteChangesTheETag(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	client := srv.Client()
	s := fences3.NewStore(client, srv.Bucket, &fences3.Options{Prefix: testkit.Namespace(t) + "/"})
	name := s.ObjectName("k")
	etag := func() string {
		out, err := client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &srv.Bucket, Key: &name})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.ETag)
	}
	if err := s.Put(ctx, "k", 1, []byte("same")); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{etag(): "Put(1, same)"}
	for _, w := range []struct {
		what string
		do   func() error
	}{
		{"Put(2, same)", func() error { return s.Put(ctx, "k", 2, []byte("same")) }},
		{"Advance(3)", func() error { return s.Advance(ctx, "k", 3) }},
		{"Delete(4)", func() error { return s.Delete(ctx, "k", 4) }},
		{"Advance(5) of the tombstone", func() error { return s.Advance(ctx, "k", 5) }},
	} {
		if err := w.do(); err != nil {
			t.Fatalf("%s: %v", w.what, err)
		}
		e := etag()
		if prev, dup := seen[e]; dup {
			t.Fatalf("%s left ETag %s, as after %s", w.what, e, prev)
		}
		seen[e] = w.what
	}

	before := etag()
	_, err := client.CopyObject(ctx, &awss3.CopyObjectInput{
		Bucket: &srv.Bucket, Key: &name, CopySource: aws.String(srv.Bucket + "/" + name),
		MetadataDirective: "REPLACE", Metadata: map[string]string{"fencekit-fence": "0000000000000000009", "fencekit-kind": "t"},
	})
	if err != nil {
		t.Fatalf("CopyObject with REPLACE: %v", err)
	}
	after := etag()
	t.Logf("%s: ETag %s before a metadata-only copy, %s after", srv.Name, before, after)
	if strings.HasPrefix(srv.Name, "versitygw") && after != before {
		t.Errorf("versitygw changed the ETag on a metadata-only copy; docs/s3.md says it keeps it")
	}
}

// ignoring is an S3 API whose PUTs lose their conditions: a server that
// does not implement If-Match and If-None-Match, or not atomically. The
// store over it checks and then writes in two steps.
type ignoring struct{ fences3.API }

func (i ignoring) PutObject(ctx context.Context, in *awss3.PutObjectInput, opts ...func(*awss3.Options)) (*awss3.PutObjectOutput, error) {
	c := *in
	c.IfMatch, c.IfNoneMatch = nil, nil
	return i.API.PutObject(ctx, &c, opts...)
}

// TestSuiteCatchesUnconditionalWrites: on a server whose conditional PUT
// does not hold (here: the conditions dropped), the conformance suite's
// concurrent checks and the linearizability kit fail. A run stops at the
// first check that catches it; it tries up to five rounds, and each round
// catches it on its own in practice.
func TestSuiteCatchesUnconditionalWrites(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	s := fences3.NewStore(ignoring{srv.Client()}, srv.Bucket, &fences3.Options{Prefix: testkit.Namespace(t) + "/"})
	var checks []fencetest.Check
	for _, c := range fencetest.Checks() {
		if strings.HasPrefix(c.Name, "Concurrent") {
			checks = append(checks, c)
		}
	}
	if len(checks) == 0 {
		t.Fatal("the suite has no Concurrent* checks any more")
	}
	for round := 1; round <= 5; round++ {
		for _, c := range checks {
			if err := c.Run(ctx, s, fencetest.Namespace()); err != nil {
				t.Logf("round %d: %s caught it: %.300s", round, c.Name, err)
				return
			}
		}
		if err := fencetest.CheckLinearizable(ctx, s, fencetest.Namespace(), nil); err != nil {
			t.Logf("round %d: Linearizable caught it: %.300s", round, err)
			return
		}
	}
	t.Fatal("five rounds of the concurrent checks and the linearizability kit passed on a store whose writes are unconditional")
}

// TestContention: when every conditional PUT finds the object changed, a
// write gives up after MaxAttempts rounds with ErrContention and leaves the
// object as it was.
func TestContention(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	plain := fences3.NewStore(srv.Client(), srv.Bucket, &fences3.Options{Prefix: prefix})
	if err := plain.Put(ctx, "k", 3, []byte("base")); err != nil {
		t.Fatal(err)
	}
	api := &wrongETag{API: srv.Client()}
	s := fences3.NewStore(api, srv.Bucket, &fences3.Options{Prefix: prefix, MaxAttempts: 3})
	err := s.Put(ctx, "k", 4, []byte("mine"))
	if !errors.Is(err, fences3.ErrContention) {
		t.Fatalf("Put against an always-changed object: %v; want ErrContention", err)
	}
	if api.puts != 3 {
		t.Fatalf("%d PUTs; want MaxAttempts = 3", api.puts)
	}
	if rec, err := plain.Get(ctx, "k"); err != nil || string(rec.Value) != "base" || rec.Fence != 3 {
		t.Fatalf("after the refused write: %q at %d (%v); want base at 3", rec.Value, rec.Fence, err)
	}
}

// wrongETag sends every conditional PUT with an ETag that never matches, as
// if another writer always got in first.
type wrongETag struct {
	fences3.API
	puts int
}

func (w *wrongETag) PutObject(ctx context.Context, in *awss3.PutObjectInput, opts ...func(*awss3.Options)) (*awss3.PutObjectOutput, error) {
	w.puts++
	c := *in
	if c.IfMatch != nil {
		c.IfMatch = aws.String(`"00000000000000000000000000000000"`)
	}
	return w.API.PutObject(ctx, &c, opts...)
}

// TestForeignObjectRefused: an object at a key's name that the store did
// not write is neither read nor overwritten.
func TestForeignObjectRefused(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	client := srv.Client()
	s := fences3.NewStore(client, srv.Bucket, &fences3.Options{Prefix: testkit.Namespace(t) + "/"})
	// "" is an empty object, which a ranged read of the header finds too
	// short (416 on AWS).
	for key, body := range map[string]string{"k": "not ours", "empty": ""} {
		name := s.ObjectName(key)
		if _, err := client.PutObject(ctx, &awss3.PutObjectInput{Bucket: &srv.Bucket, Key: &name, Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, fences3.ErrCorrupt) {
			t.Errorf("Get of a foreign object %q: %v; want ErrCorrupt", body, err)
		}
		for what, err := range map[string]error{
			"Put":     s.Put(ctx, key, 1, []byte("v")),
			"Delete":  s.Delete(ctx, key, 1),
			"Advance": s.Advance(ctx, key, 1),
		} {
			if !errors.Is(err, fences3.ErrCorrupt) {
				t.Errorf("%s over a foreign object %q: %v; want ErrCorrupt", what, body, err)
			}
		}
		out, err := client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &srv.Bucket, Key: &name})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(out.Body)
		_ = out.Body.Close()
		if b.String() != body {
			t.Fatalf("the foreign object %q now holds %q", body, b.String())
		}
	}
}

// TestBadConfigurationInvalid: a nil client, an empty bucket, a prefix too
// long or not UTF-8 are refused with fence.ErrInvalid, before any request
// (a value over MaxValueLen: TestValueTooLong).
func TestBadConfigurationInvalid(t *testing.T) {
	ctx := context.Background()
	var none fences3.API
	for what, s := range map[string]*fences3.Store{
		"nil client":      fences3.NewStore(none, "b", nil),
		"empty bucket":    fences3.NewStore(ignoring{}, "", nil),
		"long prefix":     fences3.NewStore(ignoring{}, "b", &fences3.Options{Prefix: strings.Repeat("p", 959)}),
		"non-UTF-8":       fences3.NewStore(ignoring{}, "b", &fences3.Options{Prefix: "\xff/"}),
		"NUL in a prefix": fences3.NewStore(ignoring{}, "b", &fences3.Options{Prefix: "a\x00/"}),
	} {
		for op, err := range map[string]error{
			"Put":     s.Put(ctx, "k", 1, nil),
			"Delete":  s.Delete(ctx, "k", 1),
			"Advance": s.Advance(ctx, "k", 1),
			"Get":     func() error { _, err := s.Get(ctx, "k"); return err }(),
		} {
			if !errors.Is(err, fence.ErrInvalid) {
				t.Errorf("%s: %s: %v; want ErrInvalid", what, op, err)
			}
		}
	}
}

// TestLargeValueNotCopied: a 64 MiB value goes out without the store or the
// SDK copying it (the heap grows by far less than the value during Put),
// and comes back in one buffer of its size (Get allocates little more than
// the value).
func TestLargeValueNotCopied(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB round trip")
	}
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	s := fences3.NewStore(srv.Client(), srv.Bucket, &fences3.Options{Prefix: testkit.Namespace(t) + "/"})
	const size = 64 << 20
	value := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if err := s.Put(ctx, "warm", 1, []byte("x")); err != nil { // connections, credentials
		t.Fatal(err)
	}
	put := allocated(func() {
		if err := s.Put(ctx, "big", 1, value); err != nil {
			t.Fatal(err)
		}
	})
	var rec fence.Record
	get := allocated(func() {
		var err error
		if rec, err = s.Get(ctx, "big"); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("64 MiB value: Put allocated %.1f MiB, Get %.1f MiB", float64(put)/(1<<20), float64(get)/(1<<20))
	if !bytes.Equal(rec.Value, value) || rec.Fence != 1 {
		t.Fatalf("Get returned %d bytes at fence %d; want the 64 MiB value at 1", len(rec.Value), rec.Fence)
	}
	if put > size/4 {
		t.Errorf("Put of 64 MiB allocated %d bytes; want well under the value's size (no copy)", put)
	}
	if get > size+size/4 {
		t.Errorf("Get of 64 MiB allocated %d bytes; want about one value's size", get)
	}
}

// allocated returns the bytes the whole process allocated during f.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
