package lock_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// countingBackend counts the calls that reach the backend.
type countingBackend struct {
	driver.Backend
	calls atomic.Int64
}

func (b *countingBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	b.calls.Add(1)
	return b.Backend.Acquire(ctx, req)
}

func (b *countingBackend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	b.calls.Add(1)
	return b.Backend.Inspect(ctx, name, kind)
}

// checkInvalid fails t unless err matches lock.ErrInvalid and
// fence.ErrInvalid and reads as the lock's, without fence's prefix.
func checkInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, lock.ErrInvalid) || !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("%s = %v; want an error matching lock.ErrInvalid and fence.ErrInvalid", what, err)
		return
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "lock: invalid argument: ") || strings.Contains(msg, "fence:") {
		t.Errorf("%s reads %q; want \"lock: invalid argument: ...\", without \"fence:\"", what, msg)
	}
}

func noop(context.Context, *lock.Lease) error { return nil }

// A semaphore of 0 permits is made without complaint (Client.Semaphore
// returns no error) and refused by every call on it, Inspect included,
// before anything reaches the backend, with a message that says what is
// wrong in the lock's words.
func TestSemaphoreOfNoPermitsIsRefusedByEveryCall(t *testing.T) {
	ctx := context.Background()
	b := &countingBackend{Backend: memory.NewBackend()}
	s := lock.New(b, nil).Semaphore("jobs", 0)
	for what, call := range map[string]func() error{
		"Acquire":    func() error { _, err := s.Acquire(ctx, time.Second); return err },
		"TryAcquire": func() error { _, err := s.TryAcquire(ctx, time.Second); return err },
		"Do":         func() error { return s.Do(ctx, time.Second, noop) },
		"TryDo":      func() error { return s.TryDo(ctx, time.Second, noop) },
		"Inspect":    func() error { _, err := s.Inspect(ctx); return err },
	} {
		err := call()
		checkInvalid(t, "Semaphore(\"jobs\", 0)."+what, err)
		if err != nil {
			if got, want := err.Error(), `lock: invalid argument: semaphore "jobs" of 0 permits: a semaphore has 1 to 65536`; got != want {
				t.Errorf("Semaphore(\"jobs\", 0).%s reads %q; want %q", what, got, want)
			}
		}
	}
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the backend; want none", n)
	}
}

// A read-write lock with a bad name is refused by every call on it, Inspect
// included, before anything reaches the backend.
func TestRWLockBadNameIsRefusedByEveryCall(t *testing.T) {
	ctx := context.Background()
	b := &countingBackend{Backend: memory.NewBackend()}
	c := lock.New(b, nil)
	for _, name := range []string{"", "a\x00b"} {
		l := c.RWLock(name)
		for what, call := range map[string]func() error{
			"AcquireRead":     func() error { _, err := l.AcquireRead(ctx, time.Second); return err },
			"AcquireWrite":    func() error { _, err := l.AcquireWrite(ctx, time.Second); return err },
			"TryAcquireRead":  func() error { _, err := l.TryAcquireRead(ctx, time.Second); return err },
			"TryAcquireWrite": func() error { _, err := l.TryAcquireWrite(ctx, time.Second); return err },
			"DoRead":          func() error { return l.DoRead(ctx, time.Second, noop) },
			"DoWrite":         func() error { return l.DoWrite(ctx, time.Second, noop) },
			"Inspect":         func() error { _, err := l.Inspect(ctx); return err },
		} {
			checkInvalid(t, "RWLock("+strings.ReplaceAll(name, "\x00", `\x00`)+")."+what, call())
		}
	}
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the backend; want none", n)
	}
}

// The Client's refusals of bad input read "lock: invalid argument: ...",
// never with the "fence:" of fence.ErrInvalid's own text, and still match
// both sentinels.
func TestInvalidArgumentsReadAsTheLocks(t *testing.T) {
	ctx := context.Background()
	c := lock.New(memory.NewBackend(), nil)
	var nilClient *lock.Client
	for what, call := range map[string]func() error{
		"an empty name":   func() error { _, err := c.TryAcquire(ctx, "", time.Second); return err },
		"a name with NUL": func() error { _, err := c.TryAcquire(ctx, "a\x00b", time.Second); return err },
		"a name too long": func() error {
			_, err := c.TryAcquire(ctx, strings.Repeat("x", fence.MaxKeyLen+1), time.Second)
			return err
		},
		"a ttl below the minimum":  func() error { _, err := c.TryAcquire(ctx, "job", time.Microsecond); return err },
		"Inspect of an empty name": func() error { _, err := c.Inspect(ctx, ""); return err },
		"Do with a nil function":   func() error { return c.Do(ctx, "job", time.Second, nil) },
		"a nil call option":        func() error { _, err := c.TryAcquire(ctx, "job", time.Second, nil); return err },
		"a negative MaxAttempts":   func() error { _, err := c.Acquire(ctx, "job", time.Second, lock.WithMaxAttempts(-1)); return err },
		"a nil client":             func() error { _, err := nilClient.TryAcquire(ctx, "job", time.Second); return err },
		"an empty election name":   func() error { _, err := c.Election("", time.Second).Leader(ctx); return err },
	} {
		checkInvalid(t, what, call())
	}
}

// A refusal names the shape that refused: a full semaphore says it is a
// semaphore of its number of permits, a read-write lock says so, a lock
// says so; with the holder's remaining TTL rounded.
func TestHeldMessagesNameTheShape(t *testing.T) {
	ctx := context.Background()
	c := lock.New(memory.NewBackend(), nil)
	s := c.Semaphore("jobs", 3)
	for range 3 {
		if _, err := s.TryAcquire(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	rw := c.RWLock("prices")
	w, err := rw.TryAcquireWrite(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "job", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, lock.ErrHeld) || !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("%s: %v; want ErrHeld and ErrNotAcquired", what, err)
		}
		// The holders took 20 s: the remaining TTL is 20s or, on a slow
		// run, 19.xs, rounded to a tenth of a second.
		if !regexp.MustCompile(regexp.QuoteMeta(want) + `; (the first|the first holder|it) frees in (20|19\.[0-9])s$`).MatchString(err.Error()) {
			t.Fatalf("%s reads %q; want it to end in %q and the rounded TTL", what, err, want)
		}
	}
	_, err = s.TryAcquire(ctx, time.Second)
	check("a full semaphore", err, `semaphore "jobs": all 3 permits are held`)
	_, err = rw.TryAcquireRead(ctx, time.Second)
	check("a read under a writer", err, `read-write lock "prices": a writer holds it or waits for it`)
	_, err = rw.TryAcquireWrite(ctx, time.Second)
	check("a write under a writer", err, `read-write lock "prices": others hold it or wait for it`)
	_, err = c.TryAcquire(ctx, "job", time.Second)
	check("a held lock", err, `lock "job" is held by another owner`)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// shapeless returns every *HeldError without its shape, as a backend that
// only knows the name does.
type shapeless struct{ driver.Backend }

func (b shapeless) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	var he *driver.HeldError
	if errors.As(err, &he) {
		return g, &driver.HeldError{Name: he.Name, TTL: he.TTL}
	}
	return g, err
}

// The Client fills in the shape of its request when a backend leaves it
// out, so the message says "semaphore" whatever the backend.
func TestHeldMessagesNameTheShapeWhateverTheBackend(t *testing.T) {
	ctx := context.Background()
	c := lock.New(shapeless{memory.NewBackend()}, nil)
	s := c.Semaphore("jobs", 2)
	for range 2 {
		if _, err := s.TryAcquire(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.TryAcquire(ctx, time.Second)
	if want := `semaphore "jobs": all 2 permits are held`; !errors.Is(err, lock.ErrHeld) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a full semaphore: %v; want ErrHeld, reading %q", err, want)
	}
	var he *driver.HeldError
	if !errors.As(err, &he) || he.Kind != driver.Semaphore || he.Permits != 2 {
		t.Fatalf("a full semaphore: %#v; want a *HeldError of Kind Semaphore, 2 permits", he)
	}
}
