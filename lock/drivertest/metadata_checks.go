package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// metadataChecks are the checks of holder metadata (driver.Holder.Metadata)
// on locks: what an Acquire's Request.Metadata carries is what Inspect
// reports, byte for byte, for exactly as long as that lease lives; and the
// Client sends what its Options and its context say, and refuses bad
// metadata before anything is sent.
func metadataChecks() []Check {
	return []Check{
		{"MetadataVisibleInInspect", checkMetadataVisible},
		{"MetadataRoundTripsExactly", checkMetadataExact},
		{"MetadataReplacedBySameOwnerAcquire", checkMetadataReacquire},
		{"MetadataKeptByExtendAndRefusals", checkMetadataKept},
		{"MetadataGoneAfterRelease", checkMetadataRelease},
		{"MetadataGoneAfterExpiry", checkMetadataExpiry},
		{"InvalidMetadataRefused", checkMetadataInvalid},
		{"ClientMetadataVisible", checkClientMetadata},
		{"ClientInvalidMetadataRefused", checkClientMetadataInvalid},
	}
}

// acquireWith acquires name for owner with metadata md.
func acquireWith(ctx context.Context, b driver.Backend, name, owner, md string, ttl time.Duration) error {
	_, err := acquireReq(ctx, b, withMetadata(lockRequest(name, owner, ttl), md))
	return err
}

func withMetadata(req driver.Request, md string) driver.Request {
	req.Metadata = md
	return req
}

// expectMetadata fails unless Inspect reports name held with metadata md.
func expectMetadata(ctx context.Context, b driver.Backend, name, md string) error {
	info, err := inspect(ctx, b, name)
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if !info.Held {
		return fmt.Errorf("Inspect(%q) = free; want held with metadata %q", name, md)
	}
	if info.Metadata != md {
		return fmt.Errorf("Inspect(%q).Metadata = %q; want %q", name, info.Metadata, md)
	}
	return nil
}

func checkMetadataVisible(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	if err := acquireWith(ctx, b, name, owner(), "instance=worker-7 host=a pid=42", longTTL); err != nil {
		return err
	}
	return expectMetadata(ctx, b, name, "instance=worker-7 host=a pid=42")
}

// checkMetadataExact stores values that break naive quoting or splicing in
// Lua, SQL, JSON and format strings, and the longest allowed value.
func checkMetadataExact(ctx context.Context, b driver.Backend, ns string) error {
	values := []string{
		`it's "quoted" \back\slash`,
		"line one\nline two\r\n\ttab",
		"'); DROP TABLE fencekit_leases; --",
		"]]..os.exit()..[[ %s %d %% ${x} $1",
		"ünïcødé 日本語 🔒 \u200b",
		" leading and trailing spaces ",
		strings.Repeat("é", driver.MaxMetadataLen/2),
		strings.Repeat("m", driver.MaxMetadataLen),
	}
	for i, md := range values {
		name := fmt.Sprintf("%sl%d", ns, i)
		if err := acquireWith(ctx, b, name, owner(), md, longTTL); err != nil {
			return err
		}
		if err := expectMetadata(ctx, b, name, md); err != nil {
			return err
		}
	}
	return nil
}

func checkMetadataReacquire(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	if err := acquireWith(ctx, b, name, a, "first", longTTL); err != nil {
		return err
	}
	if err := acquireWith(ctx, b, name, a, "second", longTTL); err != nil {
		return fmt.Errorf("re-acquire by the same owner: %w", err)
	}
	if err := expectMetadata(ctx, b, name, "second"); err != nil {
		return fmt.Errorf("a same-owner Acquire replaces the metadata: %w", err)
	}
	if err := acquireWith(ctx, b, name, a, "", longTTL); err != nil {
		return fmt.Errorf("re-acquire by the same owner: %w", err)
	}
	return expectMetadata(ctx, b, name, "")
}

func checkMetadataKept(ctx context.Context, b driver.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	if err := acquireWith(ctx, b, name, a, "holder", longTTL); err != nil {
		return err
	}
	if err := extend(ctx, b, name, a, longTTL); err != nil {
		return fmt.Errorf("Extend by the holder: %w", err)
	}
	if err := expectMetadata(ctx, b, name, "holder"); err != nil {
		return fmt.Errorf("after Extend: %w", err)
	}
	_, err := b.Acquire(ctx, withMetadata(lockRequest(name, c, longTTL), "intruder"))
	if !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("Acquire by a second owner while held: %v; want an error matching driver.ErrHeld", err)
	}
	req := withMetadata(lockRequest(name, c, longTTL), "intruder")
	req.Place = longTTL
	if _, err := b.Acquire(ctx, req); !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("Acquire by a second owner with a place while held: %v; want an error matching driver.ErrHeld", err)
	}
	if err := extend(ctx, b, name, c, longTTL); !errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("Extend by a second owner: %v; want an error matching driver.ErrNotHeld", err)
	}
	if err := b.Leave(ctx, lockClaim(name, c)); err != nil {
		return fmt.Errorf("Leave by the second owner: %w", err)
	}
	if err := expectMetadata(ctx, b, name, "holder"); err != nil {
		return fmt.Errorf("after another owner's refused Acquire and Extend: %w", err)
	}
	return nil
}

func checkMetadataRelease(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	if err := acquireWith(ctx, b, name, a, "holder", longTTL); err != nil {
		return err
	}
	if err := release(ctx, b, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := expectFree(ctx, b, name); err != nil {
		return err
	}
	// The next holder, who attaches none, must not inherit the last one's.
	if _, err := acquire(ctx, b, name, owner(), longTTL); err != nil {
		return err
	}
	if err := expectMetadata(ctx, b, name, ""); err != nil {
		return fmt.Errorf("a new holder without metadata after a release: %w", err)
	}
	return nil
}

func checkMetadataExpiry(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	if err := acquireWith(ctx, b, name, owner(), "holder", shortTTL); err != nil {
		return err
	}
	if err := waitFree(ctx, b, name); err != nil {
		return err
	}
	if err := expectFree(ctx, b, name); err != nil {
		return err
	}
	if err := acquireWith(ctx, b, name, owner(), "next", longTTL); err != nil {
		return err
	}
	if err := expectMetadata(ctx, b, name, "next"); err != nil {
		return fmt.Errorf("the next holder after an expiry: %w", err)
	}
	return nil
}

// badMetadata is metadata the Client refuses (driver.ValidateMetadata).
var badMetadata = map[string]string{
	"too long":     strings.Repeat("m", driver.MaxMetadataLen+1),
	"NUL":          "host=a\x00pid=1",
	"invalid UTF8": "host=\xff\xfe",
}

// checkMetadataInvalid: bad metadata in the context of a Client's call is
// refused with ErrInvalid before anything is sent.
func checkMetadataInvalid(ctx context.Context, b driver.Backend, ns string) error {
	cb := &counted{Backend: b}
	c := lock.New(cb, nil)
	for what, md := range badMetadata {
		name := ns + strings.ReplaceAll(what, " ", "-")
		mdctx := lock.ContextWithMetadata(ctx, md)
		if err := expectRefused(cb, []refusedCall{
			{"TryAcquire with " + what + " metadata", func() error { _, err := c.TryAcquire(mdctx, name, longTTL); return err }},
			{"Acquire with " + what + " metadata", func() error { _, err := c.Acquire(mdctx, name, longTTL); return err }},
			{"TryAcquireMulti with " + what + " metadata", func() error { _, err := c.TryAcquireMulti(mdctx, []string{name}, longTTL); return err }},
		}); err != nil {
			return err
		}
		if err := expectFree(ctx, b, name); err != nil {
			return fmt.Errorf("after Acquire with %s metadata was refused: %w", what, err)
		}
	}
	return nil
}

func checkClientMetadata(ctx context.Context, b driver.Backend, ns string) error {
	name, md := ns+"l", "instance=\"api-3\"\nregion=eu 🔒"
	c := lock.New(b, &lock.Options{Metadata: md})
	lease, err := c.TryAcquire(ctx, name, longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	if err := expectMetadata(ctx, b, name, md); err != nil {
		return fmt.Errorf("a lease of a Client with Options.Metadata: %w", err)
	}
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	return expectFree(ctx, b, name)
}

func checkClientMetadataInvalid(ctx context.Context, b driver.Backend, ns string) error {
	for what, md := range badMetadata {
		name := ns + strings.ReplaceAll(what, " ", "-")
		cb := &counted{Backend: b}
		c := lock.New(cb, &lock.Options{Metadata: md})
		if err := expectRefused(cb, []refusedCall{
			{fmt.Sprintf("Client.Acquire with %s Options.Metadata", what), func() error { _, err := c.Acquire(ctx, name, longTTL); return err }},
			{fmt.Sprintf("Client.TryAcquire with %s Options.Metadata", what), func() error { _, err := c.TryAcquire(ctx, name, longTTL); return err }},
			{fmt.Sprintf("Client.Do with %s Options.Metadata", what), func() error {
				return c.Do(ctx, name, longTTL, func(context.Context, *lock.Lease) error { return nil })
			}},
		}); err != nil {
			return err
		}
		if err := expectFree(ctx, b, name); err != nil {
			return fmt.Errorf("after a Client with %s metadata was refused: %w", what, err)
		}
	}
	return nil
}
