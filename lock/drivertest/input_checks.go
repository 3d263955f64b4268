package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// invalidSuffixes make a valid name or owner invalid (driver.ValidateName):
// too long, not UTF-8, or with a NUL byte, whatever comes before them.
var invalidSuffixes = map[string]string{
	"too long":          strings.Repeat("x", fence.MaxKeyLen),
	"not UTF-8":         "\xff\xfe",
	"with a NUL byte":   "a\x00b",
	"a lone surrogate":  "\xed\xa0\x80",
	"truncated UTF-8":   "\xe2\x82",
	"NUL at the end":    "\x00",
	"overlong encoding": "\xc0\xaf",
}

// counted is a backend that keeps a list of the calls made on it, so that a
// check can show that a refused call sent nothing.
type counted struct {
	driver.Backend
	mu    sync.Mutex
	calls []string
}

func (c *counted) note(call string, name string) {
	c.mu.Lock()
	c.calls = append(c.calls, fmt.Sprintf("%s(%.40q)", call, name))
	c.mu.Unlock()
}

// sent returns the calls made since the last sent, and forgets them.
func (c *counted) sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

func (c *counted) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	c.note("Acquire", req.Name+strings.Join(req.Names, ","))
	return c.Backend.Acquire(ctx, req)
}

func (c *counted) Extend(ctx context.Context, cl driver.Claim, ttl time.Duration) error {
	c.note("Extend", cl.Name)
	return c.Backend.Extend(ctx, cl, ttl)
}

func (c *counted) Release(ctx context.Context, cl driver.Claim) error {
	c.note("Release", cl.Name)
	return c.Backend.Release(ctx, cl)
}

func (c *counted) Await(ctx context.Context, cl driver.Claim, max time.Duration) error {
	c.note("Await", cl.Name)
	return c.Backend.Await(ctx, cl, max)
}

func (c *counted) Leave(ctx context.Context, cl driver.Claim) error {
	c.note("Leave", cl.Name)
	return c.Backend.Leave(ctx, cl)
}

func (c *counted) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	c.note("Inspect", name)
	return c.Backend.Inspect(ctx, name, kind)
}

// refusedCall is a call through a Client with bad input.
type refusedCall struct {
	op  string
	err func() error
}

// expectRefused fails unless every call is refused with ErrInvalid and the
// backend behind c saw none of them: the Client checks its input before
// anything is sent, so that a backend may assume valid input.
func expectRefused(c *counted, calls []refusedCall) error {
	c.sent()
	for _, call := range calls {
		err := call.err()
		if err := expectIs(call.op, err, fence.ErrInvalid); err != nil {
			return err
		}
		if sent := c.sent(); len(sent) > 0 {
			return fmt.Errorf("%s was refused (%v), but the backend was called: %v; bad input must be refused before anything is sent", call.op, err, sent)
		}
	}
	return nil
}

// checkClientInvalid: the Client refuses bad input (names, owners, TTLs,
// places, limits) with ErrInvalid before anything is sent, and a lease that
// none of the calls may touch stays as it was.
func checkClientInvalid(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	// A holder whose lease no invalid call may touch.
	held, h := ns+"held", owner()
	var tok fence.Token
	var err error
	w := timed(func() { tok, err = acquire(ctx, b, held, h, longTTL) })
	if err != nil {
		return err
	}
	cb := &counted{Backend: b}
	c := lock.New(cb, nil)
	// A lease of the Client's own, for a Lease.Extend with a bad TTL.
	lease, err := c.TryAcquire(ctx, ns+"lease", longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	acquires := func(what, n string, ttl time.Duration) []refusedCall {
		return []refusedCall{
			{"TryAcquire with " + what, func() error { _, err := c.TryAcquire(ctx, n, ttl); return err }},
			{"Acquire with " + what, func() error { _, err := c.Acquire(ctx, n, ttl); return err }},
			{"Do with " + what, func() error { return c.Do(ctx, n, ttl, func(context.Context, *lock.Lease) error { return nil }) }},
			{"Semaphore.TryAcquire with " + what, func() error { _, err := c.Semaphore(n, 2).TryAcquire(ctx, ttl); return err }},
			{"Semaphore.Acquire with " + what, func() error { _, err := c.Semaphore(n, 2).Acquire(ctx, ttl); return err }},
			{"RWLock.AcquireRead with " + what, func() error { _, err := c.RWLock(n).AcquireRead(ctx, ttl); return err }},
			{"RWLock.TryAcquireWrite with " + what, func() error { _, err := c.RWLock(n).TryAcquireWrite(ctx, ttl); return err }},
			{"TryAcquireMulti with " + what, func() error { _, err := c.TryAcquireMulti(ctx, []string{ns + "m", n}, ttl); return err }},
		}
	}
	calls := []refusedCall{
		{"Resume with an empty name", func() error { _, err := c.Resume(ctx, "", h, longTTL); return err }},
		{"Resume with an empty owner", func() error { _, err := c.Resume(ctx, held, "", longTTL); return err }},
		{"Resume with ttl 0", func() error { _, err := c.Resume(ctx, held, h, 0); return err }},
		{"Resume with ttl below 1ms", func() error { _, err := c.Resume(ctx, held, h, driver.MinTTL-time.Microsecond); return err }},
		{"Lease.Extend with ttl 0", func() error { return lease.Extend(ctx, 0) }},
		{"Lease.Extend with a negative ttl", func() error { return lease.Extend(ctx, -time.Second) }},
		{"Lease.Extend with ttl below 1ms", func() error { return lease.Extend(ctx, driver.MinTTL-time.Microsecond) }},
		{"Inspect with an empty name", func() error { _, err := c.Inspect(ctx, ""); return err }},
		{"Semaphore.Inspect with an empty name", func() error { _, err := c.Semaphore("", 1).Inspect(ctx); return err }},
		{"RWLock.Inspect with an empty name", func() error { _, err := c.RWLock("").Inspect(ctx); return err }},
		{"a semaphore of 0 permits", func() error { _, err := c.Semaphore(name, 0).TryAcquire(ctx, longTTL); return err }},
		{"a semaphore of more than MaxPermits", func() error {
			_, err := c.Semaphore(name, driver.MaxPermits+1).Acquire(ctx, longTTL)
			return err
		}},
		{"Acquire with a place below MinPlaceTTL", func() error {
			short := lock.New(cb, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: driver.MinPlaceTTL - time.Millisecond}})
			_, err := short.Acquire(ctx, name, longTTL)
			return err
		}},
	}
	calls = append(calls, acquires("an empty name", "", longTTL)...)
	calls = append(calls, acquires("ttl 0", name, 0)...)
	calls = append(calls, acquires("a negative ttl", name, -time.Second)...)
	calls = append(calls, acquires("ttl below 1ms", name, driver.MinTTL-time.Microsecond)...)
	for what, bad := range invalidSuffixes {
		calls = append(calls, acquires("a name "+what, name+bad, longTTL)...)
		calls = append(calls,
			refusedCall{"Resume with a name " + what, func() error { _, err := c.Resume(ctx, held+bad, h, longTTL); return err }},
			refusedCall{"Resume with an owner " + what, func() error { _, err := c.Resume(ctx, held, h+bad, longTTL); return err }},
			refusedCall{"Inspect with a name " + what, func() error { _, err := c.Inspect(ctx, held+bad); return err }},
			refusedCall{"Semaphore.Inspect with a name " + what, func() error { _, err := c.Semaphore(held+bad, 1).Inspect(ctx); return err }},
		)
	}
	if err := expectRefused(cb, calls); err != nil {
		return err
	}
	return first(
		expectFree(ctx, b, name),
		expectLease(ctx, b, held, h, tok, longTTL, w),
	)
}

// checkLongestInput: a name and an owner of exactly fence.MaxKeyLen bytes,
// multi-byte characters included, are valid and must work.
func checkLongestInput(ctx context.Context, b driver.Backend, ns string) error {
	pad := func(prefix string) string {
		s := prefix + strings.Repeat("é", (fence.MaxKeyLen-len(prefix))/2)
		return s + strings.Repeat("x", fence.MaxKeyLen-len(s))
	}
	name, long := pad(ns), pad(owner())
	tok, err := acquire(ctx, b, name, long, longTTL)
	if err != nil {
		return fmt.Errorf("with a name and an owner of %d bytes: %w", fence.MaxKeyLen, err)
	}
	if err := expectHolder(ctx, b, name, long, tok); err != nil {
		return err
	}
	if err := extend(ctx, b, name, long, longTTL); err != nil {
		return fmt.Errorf("Extend with a name and an owner of %d bytes: %w", fence.MaxKeyLen, err)
	}
	if err := release(ctx, b, name, long); err != nil {
		return fmt.Errorf("Release with a name and an owner of %d bytes: %w", fence.MaxKeyLen, err)
	}
	return expectFree(ctx, b, name)
}

// checkOwnersExact: an owner is compared as a whole, byte for byte. A prefix
// of the holder's owner, an extension of it, or the same letters in
// another case is another owner.
func checkOwnersExact(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	others := []string{a[:len(a)-1], a[:8], a + "0", strings.ToUpper(a), " " + a, a + " "}
	for _, o := range others {
		if _, err := take(ctx, b, name, o, longTTL); !errors.Is(err, driver.ErrHeld) {
			return fmt.Errorf("Acquire by owner %q while %q holds the lock: %v; want an error matching driver.ErrHeld", o, a, err)
		}
		if err := expectIs(fmt.Sprintf("Extend by owner %q while %q holds the lock", o, a), extend(ctx, b, name, o, 2*longTTL), driver.ErrNotHeld); err != nil {
			return err
		}
		if err := expectIs(fmt.Sprintf("Release by owner %q while %q holds the lock", o, a), release(ctx, b, name, o), driver.ErrNotHeld); err != nil {
			return err
		}
	}
	return expectLease(ctx, b, name, a, tok, longTTL, w)
}

// checkBackendCancelled: every method honours a context that has ended,
// cancelled or past its deadline, with an error matching the context's,
// and changes nothing.
//
// A deadline that ends while a call waits for its server cannot be made
// from outside a backend (the suite does not own the network); the fault
// kit checks that on a delayed network.
func checkBackendCancelled(ctx context.Context, b driver.Backend, ns string) error {
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	name, held, h := ns+"l", ns+"held", owner()
	var tok fence.Token
	var err error
	w := timed(func() { tok, err = acquire(ctx, b, held, h, 2*time.Second) })
	if err != nil {
		return err
	}
	for _, c := range []struct {
		what string
		ctx  context.Context
		want error
	}{{"a cancelled context", cancelled, context.Canceled}, {"a context past its deadline", expired, context.DeadlineExceeded}} {
		ops := []struct {
			op  string
			err error
		}{
			{"Acquire of a free lock", func() error { _, err := take(c.ctx, b, name, owner(), longTTL); return err }()},
			{"Acquire of a free lock with a place", func() error {
				req := lockRequest(name, owner(), longTTL)
				req.Place = longTTL
				_, err := b.Acquire(c.ctx, req)
				return err
			}()},
			{"re-Acquire by the holder", func() error { _, err := take(c.ctx, b, held, h, longTTL); return err }()},
			{"Extend by the holder", extend(c.ctx, b, held, h, longTTL)},
			{"Release by the holder", release(c.ctx, b, held, h)},
			{"Leave", b.Leave(c.ctx, lockClaim(held, owner()))},
			{"Inspect", func() error { _, err := inspect(c.ctx, b, held); return err }()},
		}
		for _, o := range ops {
			if o.err == nil {
				return fmt.Errorf("%s with %s succeeded; want an error matching %v", o.op, c.what, c.want)
			}
			if err := expectIs(o.op+" with "+c.what, o.err, c.want); err != nil {
				return err
			}
		}
	}
	return first(
		expectFree(ctx, b, name),
		expectLease(ctx, b, held, h, tok, 2*time.Second, w),
	)
}
