package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

func TestRetryableClassification(t *testing.T) {
	dnsTimeout := &net.DNSError{Err: "timeout", Name: "db", IsTimeout: true}
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"ErrHeld", lock.ErrHeld, true},
		{"HeldError", &lock.HeldError{Name: "job", TTL: time.Second}, true},
		{"ErrInvalid", lock.ErrInvalid, false},
		{"fence.Invalid", fence.Invalid("bad"), false},
		{"ErrInvalid wrapped with Transient", lock.Transient(lock.ErrInvalid), false},
		{"Transient", lock.Transient(errors.New("LOADING")), true},
		{"Transient wrapped", fmt.Errorf("acquire: %w", lock.Transient(errors.New("TRYAGAIN"))), true},
		{"ErrTransient", lock.ErrTransient, true},
		{"net.OpError", opErr, true},
		{"net.DNSError", dnsTimeout, true},
		{"net.ErrClosed", fmt.Errorf("read: %w", net.ErrClosed), true},
		{"io.EOF", io.EOF, true},
		{"io.ErrUnexpectedEOF", io.ErrUnexpectedEOF, true},
		{"ECONNREFUSED", syscall.ECONNREFUSED, true},
		{"ECONNRESET", fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		{"EPIPE", syscall.EPIPE, true},
		{"ETIMEDOUT", syscall.ETIMEDOUT, true},
		{"EHOSTUNREACH", syscall.EHOSTUNREACH, true},
		{"ENETUNREACH", syscall.ENETUNREACH, true},
		{"ECONNABORTED", syscall.ECONNABORTED, true},
		{"EACCES", syscall.EACCES, false},
		{"EACCES in a net.OpError", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}, false},
		{"EAGAIN", syscall.EAGAIN, true},
		{"DeadlineExceeded of one attempt", fmt.Errorf("i/o: %w", context.DeadlineExceeded), true},
		{"Canceled", context.Canceled, false},
		{"ErrNotHeld", lock.ErrNotHeld, false},
		{"plain", errors.New("ERR unknown command"), false},
		{"WRONGTYPE", errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
	} {
		if got := lock.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%s: %v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestTransientKeepsTheError(t *testing.T) {
	if lock.Transient(nil) != nil {
		t.Fatal("Transient(nil) != nil")
	}
	base := errors.New("LOADING Redis is loading the dataset in memory")
	err := lock.Transient(base)
	if !errors.Is(err, base) || !errors.Is(err, lock.ErrTransient) || err.Error() != base.Error() {
		t.Fatalf("Transient(%v) = %v; want it to match both and keep the message", base, err)
	}
	if lock.Transient(err) != err {
		t.Fatal("Transient of a transient error wraps it again")
	}
}

func TestPermanentAcquireErrorIsNotRetried(t *testing.T) {
	for name, call := range map[string]func(*lock.Client) error{
		"Acquire": func(c *lock.Client) error {
			_, err := c.Acquire(context.Background(), "job", time.Minute)
			return err
		},
		"TryAcquire": func(c *lock.Client) error {
			_, err := c.TryAcquire(context.Background(), "job", time.Minute)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(int) error { return errPermanent }}
			rec := &recorder{}
			c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, Observer: rec.observe})
			err := await(t, run(func() error { return call(c) }), name+" under context.Background")
			if !errors.Is(err, errPermanent) || !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("%s: %v; want ErrNotAcquired with the cause", name, err)
			}
			if n := f.attempts.Load(); n != 1 {
				t.Fatalf("%d attempts; want 1", n)
			}
			if n := len(rec.of(lock.EventRetrying)); n != 0 {
				t.Fatalf("%d retry events for an error that is not retried", n)
			}
		})
	}
}

func TestTransientAcquireErrorIsRetriedAndReported(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(n int) error {
		if n <= 2 {
			return errNetwork
		}
		return nil
	}}
	rec := &recorder{}
	c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, Observer: rec.observe})
	l, err := c.Acquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer l.Release(context.Background())
	if n := f.attempts.Load(); n != 3 {
		t.Fatalf("%d attempts; want 3", n)
	}
	retries := rec.of(lock.EventRetrying)
	if len(retries) != 2 {
		t.Fatalf("%d retry events; want 2", len(retries))
	}
	for i, e := range retries {
		if e.Attempt != i+1 || !errors.Is(e.Err, errNetwork) || e.Name != "job" || e.Token != 0 {
			t.Errorf("retry event %d: %+v; want attempt %d with the network error", i, e, i+1)
		}
	}
}

func TestAcquireReportsRetriesWhileHeld(t *testing.T) {
	mem := memory.NewBackend()
	if _, err := mem.Acquire(context.Background(), "job", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	c := lock.New(mem, &lock.Options{MinBackoff: time.Millisecond, MaxAttempts: 3, Observer: rec.observe})
	if _, err := c.Acquire(context.Background(), "job", time.Minute); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Acquire: %v; want ErrHeld", err)
	}
	retries := rec.of(lock.EventRetrying)
	if len(retries) != 2 { // the third and last attempt is not retried
		t.Fatalf("%d retry events; want 2", len(retries))
	}
	for _, e := range retries {
		if !errors.Is(e.Err, lock.ErrHeld) {
			t.Errorf("retry event %+v; want ErrHeld", e)
		}
	}
}

func TestKeepAliveLosesTheLeaseOnAPermanentRenewalError(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend(), extendErr: func() error { return errPermanent }}
	rec := &recorder{}
	c := lock.New(f, &lock.Options{KeepAlive: true, Observer: rec.observe})
	// The first renewal comes after a third of the TTL; the local deadline
	// is two thirds later: ample room to tell "at once" from "at the
	// deadline".
	const ttl = 3 * time.Second
	l, err := c.TryAcquire(context.Background(), "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	deadline := l.Deadline()
	await(t, l.Done(), "loss after a permanent renewal error")
	if lostAt := time.Now(); !lostAt.Before(deadline) {
		t.Fatalf("lost %v after the local deadline; want at the first failed renewal", lostAt.Sub(deadline))
	}
	if !errors.Is(l.Err(), lock.ErrLost) || !errors.Is(l.Err(), errPermanent) {
		t.Fatalf("Err = %v; want ErrLost with the renewal's error", l.Err())
	}
	if n := f.extends.Load(); n != 1 {
		t.Fatalf("%d renewals sent; want 1, a permanent error is not retried", n)
	}
}
