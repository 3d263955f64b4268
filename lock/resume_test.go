package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// flakyResumer fails its first n resume requests (Request.Resume) with
// err, after applying them when applied is set (a lost reply). calls counts
// the resume requests.
type flakyResumer struct {
	*memory.Backend
	n       atomic.Int32
	err     error
	applied bool
	calls   atomic.Int32
}

func (f *flakyResumer) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !req.Resume {
		return f.Backend.Acquire(ctx, req)
	}
	f.calls.Add(1)
	if f.n.Add(-1) >= 0 {
		if f.applied {
			_, _ = f.Backend.Acquire(ctx, req)
		}
		return driver.Grant{}, f.err
	}
	return f.Backend.Acquire(ctx, req)
}

// TestResumeRetriesTransient: a Resume whose reply was lost is retried and
// gets the same token; a permanent failure is not retried.
func TestResumeRetriesTransient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &flakyResumer{Backend: memory.NewBackend(), err: driver.Transient(errors.New("reply lost")), applied: true}
	f.n.Store(2)
	owner, _ := lock.NewOwner()
	tok, err := takeLock(ctx, f.Backend, "job", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(f, &lock.Options{MinBackoff: time.Millisecond}).Resume(ctx, "job", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != tok || f.calls.Load() != 3 {
		t.Fatalf("token %d after %d calls; want %d after 3", l.Token(), f.calls.Load(), tok)
	}

	boom := errors.New("script error")
	p := &flakyResumer{Backend: memory.NewBackend(), err: boom}
	p.n.Store(1)
	_, err = lock.New(p, nil).Resume(ctx, "job", owner, time.Minute)
	if !errors.Is(err, boom) || !errors.Is(err, lock.ErrNotAcquired) || p.calls.Load() != 1 {
		t.Fatalf("permanent failure: %v after %d calls; want it, matching ErrNotAcquired, after 1", err, p.calls.Load())
	}

	// Bounded by MaxAttempts.
	q := &flakyResumer{Backend: memory.NewBackend(), err: driver.Transient(errors.New("down"))}
	q.n.Store(100)
	_, err = lock.New(q, &lock.Options{MinBackoff: time.Millisecond, MaxAttempts: 3}).Resume(ctx, "job", owner, time.Minute)
	if !errors.Is(err, lock.ErrNotAcquired) || q.calls.Load() != 3 {
		t.Fatalf("always transient: %v after %d calls; want ErrNotAcquired after 3", err, q.calls.Load())
	}
}

// TestResumeInvalid: bad input and a nil function are refused with
// ErrInvalid, and nothing is sent.
func TestResumeInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &flakyResumer{Backend: memory.NewBackend()}
	c := lock.New(f, nil)
	owner, _ := lock.NewOwner()
	for what, err := range map[string]error{
		"empty name":      func() error { _, err := c.Resume(ctx, "", owner, time.Minute); return err }(),
		"empty owner":     func() error { _, err := c.Resume(ctx, "job", "", time.Minute); return err }(),
		"ttl below drift": func() error { _, err := c.Resume(ctx, "job", owner, time.Millisecond); return err }(),
		"nil option":      func() error { _, err := c.Resume(ctx, "job", owner, time.Minute, nil); return err }(),
		"nil fn":          c.ResumeDo(ctx, "job", owner, time.Minute, nil),
		"nil client":      func() error { _, err := (*lock.Client)(nil).Resume(ctx, "job", owner, time.Minute); return err }(),
		"nil backend":     func() error { _, err := lock.New(nil, nil).Resume(ctx, "job", owner, time.Minute); return err }(),
		"keep-alive short": func() error {
			_, err := c.Resume(ctx, "job", owner, 3*time.Millisecond, lock.WithKeepAlive(true))
			return err
		}(),
	} {
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", what, err)
		}
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("%d Resume calls sent for bad input; want 0", n)
	}
}

// TestResumeDoReleasesOnPanic: ResumeDo releases the resumed lease when fn
// panics, and lets the panic go on, as Do does.
func TestResumeDoReleasesOnPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memory.NewBackend()
	owner, _ := lock.NewOwner()
	if _, err := takeLock(ctx, mem, "job", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v; want boom", r)
			}
		}()
		_ = lock.New(mem, nil).ResumeDo(ctx, "job", owner, time.Minute, func(context.Context, *lock.Lease) error { panic("boom") })
	}()
	info, err := inspectLock(ctx, mem, "job")
	if err != nil || info.Held {
		t.Fatalf("after ResumeDo's fn panicked: %+v, %v; want free", info, err)
	}
}

// TestResumeGivesUpWhenUnreachable: a backend that never answers about the
// lock is given up on after Options.MaxUnreachable, with an error matching
// ErrUnreachable and ErrNotAcquired.
func TestResumeGivesUpWhenUnreachable(t *testing.T) {
	t.Parallel()
	f := &flakyResumer{Backend: memory.NewBackend(), err: driver.Transient(errors.New("connection refused"))}
	f.n.Store(1 << 30)
	owner, _ := lock.NewOwner()
	c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, MaxUnreachable: 50 * time.Millisecond})
	_, err := c.Resume(context.Background(), "job", owner, time.Minute)
	if !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Resume on an unreachable backend: %v; want ErrUnreachable and ErrNotAcquired", err)
	}
	if f.calls.Load() < 2 {
		t.Fatalf("%d attempts; want the transient failure retried before giving up", f.calls.Load())
	}
}
