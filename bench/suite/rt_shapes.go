package suite

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/lock"
)

// Operations of the lock-shape cases (issue 23), each next to its
// single-name baseline on the same backend.
const (
	OpSetOf2   = "set of 2: acquire + release"
	OpResume   = "resume (adopt a live lease)"
	OpExtendRS = "extend (baseline of resume)"
	// OpLockCycle is one name taken with TryAcquire and released: the
	// baseline of the permit operations.
	OpLockCycle   = "one name: acquire + release"
	OpSemaphore   = "semaphore permit: acquire + release"
	OpReadPermit  = "read permit: acquire + release"
	OpWritePermit = "write permit: acquire + release"
)

// ShapeOps are the operations the shape cases report.
var ShapeOps = []string{OpSetOf2, OpResume, OpExtendRS, OpLockCycle, OpSemaphore, OpReadPermit, OpWritePermit}

// addShapeRT adds the round-trip cases of the lock shapes on store: a set
// of two names taken with TryAcquireMulti and released, against two
// single-name TryAcquire + Release; and Client.Resume of a live lease,
// against Lease.Extend of it; and the permit cases (permitRTCases).
func addShapeRT(store, keyPart string, fk func(*RTEnv) *lock.Client) {
	for _, c := range permitRTCases(store, keyPart, fk) {
		addRT(c)
	}
	addRT(RTCase{Store: store, Op: OpSetOf2, Lib: "fencekit TryAcquireMulti + MultiLease.Release", Run: func(ctx context.Context, r *RTEnv) error {
		names := []string{r.Key("rt", keyPart, "a"), r.Key("rt", keyPart, "b")}
		c := fk(r)
		return r.Measure(func() error {
			set, err := c.TryAcquireMulti(ctx, names, TTL)
			if err != nil {
				return err
			}
			if len(set.Names()) != 2 {
				return fmt.Errorf("set of %d names: %w", len(set.Names()), errUnexpected)
			}
			return set.Release(ctx)
		})
	}})
	addRT(RTCase{Store: store, Op: OpSetOf2, Lib: "fencekit 2 x (TryAcquire + Release)", Run: func(ctx context.Context, r *RTEnv) error {
		names := []string{r.Key("rt", keyPart, "a"), r.Key("rt", keyPart, "b")}
		c := fk(r)
		return r.Measure(func() error {
			var leases []*lock.Lease
			for _, n := range names {
				l, err := c.TryAcquire(ctx, n, TTL)
				if err != nil {
					return err
				}
				leases = append(leases, l)
			}
			for _, l := range leases {
				if err := l.Release(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}})
	addRT(RTCase{Store: store, Op: OpResume, Lib: "fencekit Client.Resume", Run: func(ctx context.Context, r *RTEnv) error {
		name := r.Key("rt", keyPart, "resume")
		l, err := fk(r).TryAcquire(ctx, name, TTL)
		if err != nil {
			return err
		}
		defer l.Release(ctx) //nolint:errcheck
		other := fk(r)       // another process's Client
		return r.Measure(func() error {
			got, err := other.Resume(ctx, name, l.Owner(), TTL)
			if err == nil && got.Token() != l.Token() {
				err = fmt.Errorf("resumed token %d, want %d: %w", got.Token(), l.Token(), errUnexpected)
			}
			return err
		})
	}})
	addRT(RTCase{Store: store, Op: OpExtendRS, Lib: "fencekit Lease.Extend", Run: func(ctx context.Context, r *RTEnv) error {
		l, err := fk(r).TryAcquire(ctx, r.Key("rt", keyPart, "resume"), TTL)
		if err != nil {
			return err
		}
		defer l.Release(ctx) //nolint:errcheck
		return r.Measure(func() error { return l.Extend(ctx, TTL) })
	}})
}
