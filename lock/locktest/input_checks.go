package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// invalidSuffixes make a valid name or owner invalid for lock.ValidateName:
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

func checkBackendInvalid(ctx context.Context, b lock.Backend, ns string) error {
	name, o := ns+"l", owner()
	// A holder whose lease no invalid call may touch.
	held, h := ns+"held", owner()
	var tok fence.Token
	var err error
	w := timed(func() { tok, err = acquire(ctx, b, held, h, longTTL) })
	if err != nil {
		return err
	}
	type call struct {
		op  string
		err func() error
	}
	calls := []call{
		{"Acquire with an empty name", func() error { _, err := b.Acquire(ctx, "", o, longTTL); return err }},
		{"Acquire with an empty owner", func() error { _, err := b.Acquire(ctx, name, "", longTTL); return err }},
		{"Acquire with ttl 0", func() error { _, err := b.Acquire(ctx, name, o, 0); return err }},
		{"Acquire with a negative ttl", func() error { _, err := b.Acquire(ctx, name, o, -time.Second); return err }},
		{"Acquire with ttl below 1ms", func() error { _, err := b.Acquire(ctx, name, o, lock.MinTTL-time.Microsecond); return err }},
		{"Extend with an empty name", func() error { return b.Extend(ctx, "", h, longTTL) }},
		{"Extend with an empty owner", func() error { return b.Extend(ctx, held, "", longTTL) }},
		{"Extend with ttl 0", func() error { return b.Extend(ctx, held, h, 0) }},
		{"Extend with a negative ttl", func() error { return b.Extend(ctx, held, h, -time.Second) }},
		{"Extend with ttl below 1ms", func() error { return b.Extend(ctx, held, h, lock.MinTTL-time.Microsecond) }},
		{"Release with an empty name", func() error { return b.Release(ctx, "", h) }},
		{"Release with an empty owner", func() error { return b.Release(ctx, held, "") }},
		{"Inspect with an empty name", func() error { _, err := b.Inspect(ctx, ""); return err }},
	}
	for what, bad := range invalidSuffixes {
		calls = append(calls,
			call{"Acquire with a name " + what, func() error { _, err := b.Acquire(ctx, name+bad, o, longTTL); return err }},
			call{"Acquire with an owner " + what, func() error { _, err := b.Acquire(ctx, name, o+bad, longTTL); return err }},
			call{"Extend with a name " + what, func() error { return b.Extend(ctx, held+bad, h, longTTL) }},
			call{"Extend with an owner " + what, func() error { return b.Extend(ctx, held, h+bad, longTTL) }},
			call{"Release with a name " + what, func() error { return b.Release(ctx, held+bad, h) }},
			call{"Release with an owner " + what, func() error { return b.Release(ctx, held, h+bad) }},
			call{"Inspect with a name " + what, func() error { _, err := b.Inspect(ctx, held+bad); return err }},
		)
	}
	for _, c := range calls {
		if err := expectIs(c.op, c.err(), fence.ErrInvalid); err != nil {
			return err
		}
	}
	return first(
		expectFree(ctx, b, name),
		expectLease(ctx, b, held, h, tok, longTTL, w),
	)
}

// checkLongestInput: a name and an owner of exactly fence.MaxKeyLen bytes,
// multi-byte characters included, are valid and must work.
func checkLongestInput(ctx context.Context, b lock.Backend, ns string) error {
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
	if err := b.Extend(ctx, name, long, longTTL); err != nil {
		return fmt.Errorf("Extend with a name and an owner of %d bytes: %w", fence.MaxKeyLen, err)
	}
	if err := b.Release(ctx, name, long); err != nil {
		return fmt.Errorf("Release with a name and an owner of %d bytes: %w", fence.MaxKeyLen, err)
	}
	return expectFree(ctx, b, name)
}

// checkOwnersExact: an owner is compared as a whole, byte for byte. A prefix
// of the holder's owner, an extension of it, or the same letters in
// another case is another owner.
func checkOwnersExact(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	others := []string{a[:len(a)-1], a[:8], a + "0", strings.ToUpper(a), " " + a, a + " "}
	for _, o := range others {
		if _, err := b.Acquire(ctx, name, o, longTTL); !errors.Is(err, lock.ErrHeld) {
			return fmt.Errorf("Acquire by owner %q while %q holds the lock: %v; want an error matching lock.ErrHeld", o, a, err)
		}
		if err := expectIs(fmt.Sprintf("Extend by owner %q while %q holds the lock", o, a), b.Extend(ctx, name, o, 2*longTTL), lock.ErrNotHeld); err != nil {
			return err
		}
		if err := expectIs(fmt.Sprintf("Release by owner %q while %q holds the lock", o, a), b.Release(ctx, name, o), lock.ErrNotHeld); err != nil {
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
func checkBackendCancelled(ctx context.Context, b lock.Backend, ns string) error {
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
			{"Acquire of a free lock", func() error { _, err := b.Acquire(c.ctx, name, owner(), longTTL); return err }()},
			{"re-Acquire by the holder", func() error { _, err := b.Acquire(c.ctx, held, h, longTTL); return err }()},
			{"Extend by the holder", b.Extend(c.ctx, held, h, longTTL)},
			{"Release by the holder", b.Release(c.ctx, held, h)},
			{"Inspect", func() error { _, err := b.Inspect(c.ctx, held); return err }()},
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
