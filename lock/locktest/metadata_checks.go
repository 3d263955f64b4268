package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lock"
)

// RunMetadata runs MetadataChecks as subtests of t, as Run does. Holder
// metadata is optional in the Backend contract (a backend that keeps none
// reports ""), so these checks are not part of Run: a backend that stores
// metadata calls RunMetadata too.
func RunMetadata(t *testing.T, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	runChecks(t, MetadataChecks(), newBackend)
}

// MetadataChecks returns the checks of holder metadata (lock.Info.Metadata):
// what an Acquire's context carries is what Inspect reports, byte for byte,
// for exactly as long as that lease lives.
func MetadataChecks() []Check {
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

// acquireWith acquires name for owner with md in the context.
func acquireWith(ctx context.Context, b lock.Backend, name, owner, md string, ttl time.Duration) error {
	_, err := acquire(lock.ContextWithMetadata(ctx, md), b, name, owner, ttl)
	return err
}

// expectMetadata fails unless Inspect reports name held with metadata md.
func expectMetadata(ctx context.Context, b lock.Backend, name, md string) error {
	info, err := b.Inspect(ctx, name)
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

func checkMetadataVisible(ctx context.Context, b lock.Backend, ns string) error {
	name := ns + "l"
	if err := acquireWith(ctx, b, name, owner(), "instance=worker-7 host=a pid=42", longTTL); err != nil {
		return err
	}
	return expectMetadata(ctx, b, name, "instance=worker-7 host=a pid=42")
}

// checkMetadataExact stores values that break naive quoting or splicing in
// Lua, SQL, JSON and format strings, and the longest allowed value.
func checkMetadataExact(ctx context.Context, b lock.Backend, ns string) error {
	values := []string{
		`it's "quoted" \back\slash`,
		"line one\nline two\r\n\ttab",
		"'); DROP TABLE fencekit_leases; --",
		"]]..os.exit()..[[ %s %d %% ${x} $1",
		"ünïcødé 日本語 🔒 \u200b",
		" leading and trailing spaces ",
		strings.Repeat("é", lock.MaxMetadataLen/2),
		strings.Repeat("m", lock.MaxMetadataLen),
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

func checkMetadataReacquire(ctx context.Context, b lock.Backend, ns string) error {
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

func checkMetadataKept(ctx context.Context, b lock.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	if err := acquireWith(ctx, b, name, a, "holder", longTTL); err != nil {
		return err
	}
	if err := b.Extend(lock.ContextWithMetadata(ctx, "extend"), name, a, longTTL); err != nil {
		return fmt.Errorf("Extend by the holder: %w", err)
	}
	if err := expectMetadata(ctx, b, name, "holder"); err != nil {
		return fmt.Errorf("after Extend: %w", err)
	}
	_, err := b.Acquire(lock.ContextWithMetadata(ctx, "intruder"), name, c, longTTL)
	if !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("Acquire by a second owner while held: %v; want an error matching lock.ErrHeld", err)
	}
	if err := b.Extend(lock.ContextWithMetadata(ctx, "intruder"), name, c, longTTL); !errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("Extend by a second owner: %v; want an error matching lock.ErrNotHeld", err)
	}
	if err := expectMetadata(ctx, b, name, "holder"); err != nil {
		return fmt.Errorf("after another owner's refused Acquire and Extend: %w", err)
	}
	return nil
}

func checkMetadataRelease(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	if err := acquireWith(ctx, b, name, a, "holder", longTTL); err != nil {
		return err
	}
	if err := b.Release(ctx, name, a); err != nil {
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

func checkMetadataExpiry(ctx context.Context, b lock.Backend, ns string) error {
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

// badMetadata is metadata every backend must refuse.
var badMetadata = map[string]string{
	"too long":     strings.Repeat("m", lock.MaxMetadataLen+1),
	"NUL":          "host=a\x00pid=1",
	"invalid UTF8": "host=\xff\xfe",
}

func checkMetadataInvalid(ctx context.Context, b lock.Backend, ns string) error {
	for what, md := range badMetadata {
		name := ns + strings.ReplaceAll(what, " ", "-")
		_, err := b.Acquire(lock.ContextWithMetadata(ctx, md), name, owner(), longTTL)
		if err := expectIs(fmt.Sprintf("Acquire with %s metadata", what), err, lock.ErrInvalid); err != nil {
			return err
		}
		if err := expectFree(ctx, b, name); err != nil {
			return fmt.Errorf("after Acquire with %s metadata was refused: %w", what, err)
		}
	}
	return nil
}

func checkClientMetadata(ctx context.Context, b lock.Backend, ns string) error {
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

func checkClientMetadataInvalid(ctx context.Context, b lock.Backend, ns string) error {
	for what, md := range badMetadata {
		name := ns + strings.ReplaceAll(what, " ", "-")
		c := lock.New(b, &lock.Options{Metadata: md})
		_, err := c.Acquire(ctx, name, longTTL)
		if err := expectIs(fmt.Sprintf("Client.Acquire with %s Options.Metadata", what), err, lock.ErrInvalid); err != nil {
			return err
		}
		_, err = c.TryAcquire(ctx, name, longTTL)
		if err := expectIs(fmt.Sprintf("Client.TryAcquire with %s Options.Metadata", what), err, lock.ErrInvalid); err != nil {
			return err
		}
		err = c.Do(ctx, name, longTTL, func(context.Context, *lock.Lease) error { return nil })
		if err := expectIs(fmt.Sprintf("Client.Do with %s Options.Metadata", what), err, lock.ErrInvalid); err != nil {
			return err
		}
		if err := expectFree(ctx, b, name); err != nil {
			return fmt.Errorf("after a Client with %s metadata was refused: %w", what, err)
		}
	}
	return nil
}
