package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// mdRecorder records the metadata each Acquire request carried.
type mdRecorder struct {
	driver.Backend
	mu   sync.Mutex
	seen []string
}

func (r *mdRecorder) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Metadata)
	r.mu.Unlock()
	return r.Backend.Acquire(ctx, req)
}

func (r *mdRecorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

func TestClientAttachesMetadata(t *testing.T) {
	ctx := context.Background()
	rec := &mdRecorder{Backend: memory.NewBackend()}
	c := lock.New(rec, &lock.Options{Metadata: "instance=a"})

	l, err := c.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info, err := inspectLock(ctx, rec, "a")
	if err != nil || info.Metadata != "instance=a" {
		t.Fatalf("Inspect = %+v, %v; want metadata instance=a", info, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := inspectLock(ctx, rec, "a"); info.Metadata != "" {
		t.Fatalf("Inspect of a released lock = %+v; want no metadata", info)
	}
	if _, err := c.TryAcquire(ctx, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "c", time.Minute, func(context.Context, *lock.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := rec.calls(); len(got) != 3 || got[0] != "instance=a" || got[1] != "instance=a" || got[2] != "instance=a" {
		t.Fatalf("Acquire, TryAcquire, Do sent metadata %q; want instance=a each time", got)
	}
}

// Options.Metadata overrides metadata in the caller's context; without it,
// the context's metadata goes through.
func TestClientMetadataFromContext(t *testing.T) {
	ctx := lock.ContextWithMetadata(context.Background(), "from-ctx")
	rec := &mdRecorder{Backend: memory.NewBackend()}
	if _, err := lock.New(rec, nil).TryAcquire(ctx, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.New(rec, &lock.Options{Metadata: "from-options"}).TryAcquire(ctx, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := rec.calls(); len(got) != 2 || got[0] != "from-ctx" || got[1] != "from-options" {
		t.Fatalf("backend saw metadata %q; want [from-ctx from-options]", got)
	}
}

func TestClientRefusesBadMetadata(t *testing.T) {
	ctx := context.Background()
	for what, md := range map[string]string{
		"too long":     strings.Repeat("x", driver.MaxMetadataLen+1),
		"NUL":          "a\x00b",
		"invalid UTF8": "\xc3\x28",
	} {
		rec := &mdRecorder{Backend: memory.NewBackend()}
		c := lock.New(rec, &lock.Options{Metadata: md})
		_, err1 := c.Acquire(ctx, "a", time.Minute)
		_, err2 := c.TryAcquire(ctx, "a", time.Minute)
		err3 := c.Do(ctx, "a", time.Minute, func(context.Context, *lock.Lease) error { return nil })
		_, err4 := lock.New(rec, nil).TryAcquire(lock.ContextWithMetadata(ctx, md), "a", time.Minute)
		for i, err := range []error{err1, err2, err3, err4} {
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("%s metadata, call %d: %v; want ErrInvalid", what, i+1, err)
			}
		}
		if n := len(rec.calls()); n != 0 {
			t.Errorf("%s metadata: %d Acquire calls reached the backend; want none", what, n)
		}
	}
}

// TestClientChecksMetadataBeforeSending: the Client sends metadata that
// driver.ValidateMetadata accepts, as it is, and refuses the rest with
// ErrInvalid before anything is sent (the driver checks nothing again).
func TestClientChecksMetadataBeforeSending(t *testing.T) {
	ctx := context.Background()
	for md, ok := range map[string]bool{
		"":                                 true,
		"host=a pid=1":                     true,
		"line\nbreak \"quote\" 'single' 🔒": true,
		strings.Repeat("x", driver.MaxMetadataLen):   true,
		strings.Repeat("x", driver.MaxMetadataLen+1): false,
		"nul\x00":      false,
		"\xff":         false,
		"\xed\xa0\x80": false, // a UTF-16 surrogate
	} {
		rec := &mdRecorder{Backend: memory.NewBackend()}
		l, err := lock.New(rec, nil).TryAcquire(lock.ContextWithMetadata(ctx, md), "a", time.Minute)
		got := rec.calls()
		switch {
		case ok && (err != nil || len(got) != 1 || got[0] != md):
			t.Errorf("metadata %.20q: %v, sent %.20q; want it sent as it is", md, err, got)
		case !ok && (!errors.Is(err, lock.ErrInvalid) || len(got) != 0):
			t.Errorf("metadata %.20q: %v, %d request(s) sent; want ErrInvalid and none", md, err, len(got))
		}
		if l != nil {
			_ = l.Release(ctx)
		}
	}
}

// TestClientChecksAcquireBeforeSending: what ValidateAcquire checked for a
// backend (the arguments, and the metadata the context carries, which it
// returned) the Client checks once, before anything is sent, and the
// metadata reaches the driver as Request.Metadata.
func TestClientChecksAcquireBeforeSending(t *testing.T) {
	ctx := lock.ContextWithMetadata(context.Background(), "m")
	rec := &mdRecorder{Backend: memory.NewBackend()}
	c := lock.New(rec, nil)
	if _, err := c.TryAcquire(ctx, "n", time.Second); err != nil {
		t.Fatalf("TryAcquire with metadata m: %v", err)
	}
	if got := rec.calls(); len(got) != 1 || got[0] != "m" {
		t.Fatalf("the driver was sent metadata %q; want [m]", got)
	}
	if _, err := c.TryAcquire(ctx, "", time.Second); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("empty name: %v; want ErrInvalid", err)
	}
	if _, err := c.TryAcquire(lock.ContextWithMetadata(ctx, "\x00"), "n2", time.Second); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("NUL metadata: %v; want ErrInvalid", err)
	}
	if got := rec.calls(); len(got) != 1 {
		t.Fatalf("%d requests sent; want only the first, the bad ones refused before sending", len(got))
	}
	if _, err := c.TryAcquire(context.Background(), "n3", time.Second); err != nil {
		t.Fatal(err)
	}
	if got := rec.calls(); len(got) != 2 || got[1] != "" {
		t.Fatalf("a bare context sent metadata %q; want none", got[1:])
	}
}

func TestDefaultMetadata(t *testing.T) {
	md := lock.DefaultMetadata()
	if err := driver.ValidateMetadata(md); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := fmt.Sprintf("pid=%d", os.Getpid())
	if !strings.HasPrefix(md, "host=") || !strings.HasSuffix(md, " "+want) || !utf8.ValidString(md) {
		t.Fatalf("DefaultMetadata() = %q; want host=%s %s", md, host, want)
	}
	if host != "" && md != "host="+host+" "+want {
		t.Fatalf("DefaultMetadata() = %q; want host=%s %s", md, host, want)
	}
}
