package suite

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	fencepg "github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// fencekit on PostgreSQL: Store.Put, Guard.Check, UpdateFenced and the lease
// Backend, on this run's own tables (made by Migrate).

func init() {
	addCase(Case{Group: "pg-write-1", Name: "fencekit Store.Put", Order: 1, Op: benchPGPut1})
	addCase(Case{Group: "pg-write-32", Name: "fencekit Store.Put", Order: 1, Run: benchPGPut32})
	addCase(Case{Group: "pg-tx-1", Name: "Guard.Check + transaction", Order: 1, Op: benchGuardTx})
	addCase(Case{Group: "pg-row-1", Name: "UpdateFenced", Order: 1, Op: benchUpdateFenced})
	addCase(Case{Group: "pg-lock-1", Name: "fencekit Backend", Order: 1, Op: benchPGBackend})
	addCase(Case{Group: "pg-lock-1", Name: "fencekit Client", Order: 2, Op: benchPGClient})
	setups = append(setups, setupFencekitPG)
	cleanups = append(cleanups, cleanupFencekitPG)
}

func (e *Env) pgOptions() *fencepg.Options {
	return &fencepg.Options{
		StoreTable: pgx.Identifier{e.Table("store")},
		LeaseTable: pgx.Identifier{e.Table("leases")},
	}
}

func setupFencekitPG(ctx context.Context, e *Env) error {
	if e.PG == nil {
		return nil
	}
	return fencepg.Migrate(ctx, e.PG, e.pgOptions())
}

func cleanupFencekitPG(ctx context.Context, e *Env) {
	if e.PG == nil {
		return
	}
	o := e.pgOptions()
	_, _ = e.PG.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s`, o.StoreTable.Sanitize(), o.LeaseTable.Sanitize()))
}

func benchPGPut1(e *Env) (op, error) {
	s := fencepg.NewStore(e.PG, e.pgOptions())
	key := e.Key("upsert", "lat")
	return func(ctx context.Context) (bool, error) {
		return true, s.Put(ctx, key, 1, e.Value)
	}, nil
}

func benchPGPut32(b *testing.B, e *Env) {
	s := fencepg.NewStore(e.PG, e.pgOptions())
	st := runWorkers(b, e, Workers, func(w int) op {
		key := e.Key("upsert", "tp", w)
		return func(ctx context.Context) (bool, error) { return true, s.Put(ctx, key, 1, e.Value) }
	})
	b.ReportMetric(float64(b.N)/st.Elapsed.Seconds(), "ops/s")
}

func benchGuardTx(e *Env) (op, error) {
	g := fencepg.NewGuard(e.pgOptions())
	resource := e.Key("account", 1)
	return benchTx(e, func(ctx context.Context, tx pgx.Tx) error {
		return g.Check(ctx, tx, resource, 1)
	})
}

func benchUpdateFenced(e *Env) (op, error) {
	row := fencepg.Row{Table: pgx.Identifier{e.Table("accounts")}, Key: fencepg.Match{"id": int64(3)}}
	var n int64
	return func(ctx context.Context) (bool, error) {
		n++
		return true, fencepg.UpdateFenced(ctx, e.PG, row, 1, map[string]any{"balance": n})
	}, nil
}

func benchPGBackend(e *Env) (op, error) {
	be := fencepg.NewBackend(e.PG, e.pgOptions())
	owner, err := lock.NewOwner()
	if err != nil {
		return nil, err
	}
	name := e.Key("pglock", "backend")
	req := driver.Request{Name: name, Owner: owner, TTL: TTL, Kind: driver.Exclusive}
	claim := driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
	return func(ctx context.Context) (bool, error) {
		if _, err := be.Acquire(ctx, req); err != nil {
			return false, err
		}
		return true, be.Release(ctx, claim)
	}, nil
}

func benchPGClient(e *Env) (op, error) {
	c := lock.New(fencepg.NewBackend(e.PG, e.pgOptions()), nil)
	name := e.Key("pglock", "client")
	return func(ctx context.Context) (bool, error) {
		l, err := c.TryAcquire(ctx, name, TTL)
		if err != nil {
			if errors.Is(err, lock.ErrHeld) {
				err = errors.Join(err, errUnexpected)
			}
			return false, err
		}
		return true, l.Release(ctx)
	}, nil
}

func init() {
	fk := func(r *RTEnv) *lock.Client { return lock.New(fencepg.NewBackend(r.PG, r.pgOptions()), nil) }
	addRT(RTCase{Store: "PostgreSQL", Op: "write", Lib: "fencekit Store.Put", Run: func(ctx context.Context, r *RTEnv) error {
		s := fencepg.NewStore(r.PG, r.pgOptions())
		return r.Measure(func() error { return s.Put(ctx, r.Key("rt", "put"), 1, r.Value) })
	}})
	addRT(RTCase{Store: "PostgreSQL", Op: "write (stale, refused)", Lib: "fencekit Store.Put", Run: func(ctx context.Context, r *RTEnv) error {
		s := fencepg.NewStore(r.PG, r.pgOptions())
		key := r.Key("rt", "stale")
		if err := s.Put(ctx, key, 2, r.Value); err != nil {
			return err
		}
		return r.Measure(func() error {
			if err := s.Put(ctx, key, 1, r.Value); !errors.Is(err, fence.ErrStale) {
				return fmt.Errorf("stale put: %v: %w", err, errUnexpected)
			}
			return nil
		})
	}})
	addRT(RTCase{Store: "PostgreSQL", Op: "read", Lib: "fencekit Store.Get", Run: func(ctx context.Context, r *RTEnv) error {
		s := fencepg.NewStore(r.PG, r.pgOptions())
		return r.Measure(func() error { _, err := s.Get(ctx, r.Key("rt", "put")); return err })
	}})
	addRT(RTCase{Store: "PostgreSQL", Op: "transaction", Lib: "Guard.Check + BEGIN; UPDATE; COMMIT", Run: func(ctx context.Context, r *RTEnv) error {
		g := fencepg.NewGuard(r.pgOptions())
		return r.Measure(func() error {
			return accountTx(ctx, r.PG, r.Env, func(ctx context.Context, tx pgx.Tx) error {
				return g.Check(ctx, tx, r.Key("rt", "account"), 1)
			})
		})
	}})
	addLockRT("PostgreSQL", "pglock", fk)
	addShapeRT("PostgreSQL", "pglock", fk)
}
