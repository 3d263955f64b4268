package suite

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/lock"
)

// addLockRT adds the round-trip cases of a fencekit lock on store: acquire
// of a free and of a held lock, extend and release, on lock names made from
// keyPart, through the Client that fk returns.
func addLockRT(store, keyPart string, fk func(*RTEnv) *lock.Client) {
	addRT(RTCase{Store: store, Op: "acquire (free)", Lib: "fencekit", Run: func(ctx context.Context, r *RTEnv) error {
		var l *lock.Lease
		err := r.Measure(func() (err error) { l, err = fk(r).TryAcquire(ctx, r.Key("rt", keyPart), TTL); return err })
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}})
	addRT(RTCase{Store: store, Op: "acquire (held)", Lib: "fencekit", Run: func(ctx context.Context, r *RTEnv) error {
		key := r.Key("rt", keyPart)
		l, err := fk(r).TryAcquire(ctx, key, TTL)
		if err != nil {
			return err
		}
		defer l.Release(ctx) //nolint:errcheck
		return r.Measure(func() error {
			_, err := fk(r).TryAcquire(ctx, key, TTL)
			if errors.Is(err, lock.ErrHeld) {
				return nil
			}
			return fmt.Errorf("held lock acquired: %v: %w", err, errUnexpected)
		})
	}})
	addRT(RTCase{Store: store, Op: "extend", Lib: "fencekit", Run: func(ctx context.Context, r *RTEnv) error {
		l, err := fk(r).TryAcquire(ctx, r.Key("rt", keyPart), TTL)
		if err != nil {
			return err
		}
		defer l.Release(ctx) //nolint:errcheck
		return r.Measure(func() error { return l.Extend(ctx, TTL) })
	}})
	addRT(RTCase{Store: store, Op: "release", Lib: "fencekit", Run: func(ctx context.Context, r *RTEnv) error {
		l, err := fk(r).TryAcquire(ctx, r.Key("rt", keyPart), TTL)
		if err != nil {
			return err
		}
		return r.Measure(func() error { return l.Release(ctx) })
	}})
}
