package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// baseOnly hides every optional capability of a backend: Client.Resume must
// then resume through Inspect, Extend, Inspect.
type baseOnly struct{ lock.Backend }

// TestResumeThroughBaseBackend runs the resume checks of locktest through a
// Client over a backend without lock.Resumer, on a fresh and a shared
// memory backend: the base-contract path meets what the Client promises.
func TestResumeThroughBaseBackend(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"ClientResumeContinuesLease", "ClientResumeKeepsAlive", "ResumeDoRunsAndReleases"} {
		var check locktest.Check
		for _, c := range locktest.ResumeChecks() {
			if c.Name == name {
				check = c
			}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), locktest.Timeout)
			defer cancel()
			// The checks ask for a Resumer: give them one whose Resume is
			// Client.Resume over the hidden backend.
			b := viaClient{baseOnly{memory.NewBackend()}}
			if err := check.Run(ctx, b, locktest.Namespace()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// viaClient is a lock.Resumer whose Resume is Client.Resume over a backend
// without the capability: the base-contract path, seen from locktest.
type viaClient struct{ lock.Backend }

func (v viaClient) Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	l, err := lock.New(v.Backend, &lock.Options{MaxAttempts: 3}).Resume(ctx, name, owner, ttl)
	if err != nil {
		return 0, err
	}
	return l.Token(), nil
}

// TestResumeThroughBaseChecks runs every resume check of locktest on the
// base-contract path (viaClient): keeps the token and renews, refuses a
// released, expired or other owner's lease without re-creating it, keeps
// the metadata, refuses bad input.
func TestResumeThroughBaseChecks(t *testing.T) {
	t.Parallel()
	locktest.RunResume(t, func(*testing.T) lock.Backend { return viaClient{baseOnly{memory.NewBackend()}} })
}

// swapOnExtend re-takes the lease for the same owner (a new lease, a new
// token) right before the first Extend: another process with the same saved
// owner value, racing the resume.
type swapOnExtend struct {
	baseOnly
	swapped atomic.Bool
	newTok  atomic.Int64
}

func (s *swapOnExtend) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	if s.swapped.CompareAndSwap(false, true) {
		if err := s.Backend.Release(ctx, name, owner); err != nil {
			return err
		}
		tok, err := s.Backend.Acquire(ctx, name, owner, ttl)
		if err != nil {
			return err
		}
		s.newTok.Store(int64(tok))
	}
	return s.Backend.Extend(ctx, name, owner, ttl)
}

// TestResumeThroughBaseLeaseReplaced: when owner's lease is replaced by a
// new one of the same owner between the two reads, the attempt is retried
// and the resumed lease carries the new lease's token, never the old one.
func TestResumeThroughBaseLeaseReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memory.NewBackend()
	b := &swapOnExtend{baseOnly: baseOnly{mem}}
	owner, _ := lock.NewOwner()
	old, err := mem.Acquire(ctx, "job", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var retries atomic.Int32
	c := lock.New(b, &lock.Options{Observer: func(e lock.Event) {
		if e.Kind == lock.EventRetrying {
			retries.Add(1)
		}
	}})
	l, err := c.Resume(ctx, "job", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Token(), fence.Token(b.newTok.Load()); got != want || got == old {
		t.Fatalf("resumed token %d; want %d, the replacing lease's (the old one was %d)", got, want, old)
	}
	if retries.Load() != 1 {
		t.Fatalf("%d retries; want 1, after the lease changed", retries.Load())
	}
}

// flakyResumer fails its first n Resume calls with err, after applying them
// when applied is set (a lost reply).
type flakyResumer struct {
	*memory.Backend
	n       atomic.Int32
	err     error
	applied bool
	calls   atomic.Int32
}

func (f *flakyResumer) Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	f.calls.Add(1)
	if f.n.Add(-1) >= 0 {
		if f.applied {
			_, _ = f.Backend.Resume(ctx, name, owner, ttl)
		}
		return 0, f.err
	}
	return f.Backend.Resume(ctx, name, owner, ttl)
}

// TestResumeRetriesTransient: a Resume whose reply was lost is retried and
// gets the same token; a permanent failure is not retried.
func TestResumeRetriesTransient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &flakyResumer{Backend: memory.NewBackend(), err: lock.Transient(errors.New("reply lost")), applied: true}
	f.n.Store(2)
	owner, _ := lock.NewOwner()
	tok, err := f.Backend.Acquire(ctx, "job", owner, time.Minute)
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
	q := &flakyResumer{Backend: memory.NewBackend(), err: lock.Transient(errors.New("down"))}
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
	if _, err := mem.Acquire(ctx, "job", owner, time.Minute); err != nil {
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
	info, err := mem.Inspect(ctx, "job")
	if err != nil || info.Held {
		t.Fatalf("after ResumeDo's fn panicked: %+v, %v; want free", info, err)
	}
}

// TestResumeGivesUpWhenUnreachable: a backend that never answers about the
// lock is given up on after Options.MaxUnreachable, with an error matching
// ErrUnreachable and ErrNotAcquired.
func TestResumeGivesUpWhenUnreachable(t *testing.T) {
	t.Parallel()
	f := &flakyResumer{Backend: memory.NewBackend(), err: lock.Transient(errors.New("connection refused"))}
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
