package driver_test

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

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
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
		{"ErrHeld", driver.ErrHeld, true},
		{"HeldError", &driver.HeldError{Name: "job", TTL: time.Second}, true},
		{"ErrInvalid", driver.ErrInvalid, false},
		{"fence.Invalid", fence.Invalid("bad"), false},
		{"ErrInvalid wrapped with Transient", driver.Transient(driver.ErrInvalid), false},
		{"Transient", driver.Transient(errors.New("LOADING")), true},
		{"Transient wrapped", fmt.Errorf("acquire: %w", driver.Transient(errors.New("TRYAGAIN"))), true},
		{"ErrTransient", driver.ErrTransient, true},
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
		{"ErrNotHeld", driver.ErrNotHeld, false},
		{"plain", errors.New("ERR unknown command"), false},
		{"WRONGTYPE", errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
	} {
		if got := driver.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%s: %v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestTransientKeepsTheError(t *testing.T) {
	if driver.Transient(nil) != nil {
		t.Fatal("Transient(nil) != nil")
	}
	base := errors.New("LOADING Redis is loading the dataset in memory")
	err := driver.Transient(base)
	if !errors.Is(err, base) || !errors.Is(err, driver.ErrTransient) || err.Error() != base.Error() {
		t.Fatalf("Transient(%v) = %v; want it to match both and keep the message", base, err)
	}
	if driver.Transient(err) != err {
		t.Fatal("Transient of a transient error wraps it again")
	}
}

func TestHeldError(t *testing.T) {
	err := error(&driver.HeldError{Name: "job", TTL: time.Second})
	if !errors.Is(err, driver.ErrHeld) || errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("HeldError matching is wrong: %v", err)
	}
	if err.Error() == (&driver.HeldError{Name: "job"}).Error() {
		t.Fatal("the message should mention the remaining TTL when known")
	}
}

// A HeldError's message names the shape that refused the caller, and rounds
// the remaining TTL to what a reader needs.
func TestHeldErrorNamesTheShape(t *testing.T) {
	for _, tc := range []struct {
		err  driver.HeldError
		want string
	}{
		{driver.HeldError{Name: "job"}, `lock "job" is held by another owner`},
		{driver.HeldError{Name: "job", Kind: driver.Exclusive, TTL: 19345 * time.Millisecond}, `lock "job" is held by another owner; it frees in 19.3s`},
		{driver.HeldError{Name: "job", TTL: 250400 * time.Microsecond}, `lock "job" is held by another owner; it frees in 250ms`},
		{driver.HeldError{Name: "jobs", Kind: driver.Semaphore, Permits: 3, TTL: 19345 * time.Millisecond}, `semaphore "jobs": all 3 permits are held; the first frees in 19.3s`},
		{driver.HeldError{Name: "jobs", Permits: 3}, `semaphore "jobs": all 3 permits are held`},
		{driver.HeldError{Name: "jobs", Kind: driver.Semaphore}, `semaphore "jobs": all permits are held`},
		{driver.HeldError{Name: "prices", Kind: driver.Read, TTL: 2 * time.Second}, `read-write lock "prices": a writer holds it or waits for it; the first holder frees in 2s`},
		{driver.HeldError{Name: "prices", Kind: driver.Write}, `read-write lock "prices": others hold it or wait for it`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v reads %q; want %q", tc.err, got, tc.want)
		}
	}
}
