package faulttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// PostgreSQL restarts in the middle of a transaction fenced by Guard: the
// commit fails, nothing of it is applied (neither the caller's rows nor the
// fence), the lease and its token survive (they were committed before), and
// a retry with a fresh lease succeeds while the old token is now refused.
func TestPostgresRestartMidGuardTransaction(t *testing.T) {
	ctx := testCtx(t)
	srv := testkit.NewPostgresServer(t)
	pool := srv.Pool(t) // pings before handing out: recovers from the restart
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts VALUES (1, 100), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	backend, store, guard := postgres.NewBackend(pool, nil), postgres.NewStore(pool, nil), postgres.NewGuard(nil)
	client := lock.New(backend, nil)
	a, err := client.TryAcquire(ctx, "transfer", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Check(ctx, tx, "accounts", a.Token()); err != nil {
		t.Fatalf("guard check: %v", err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 30 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 30 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}

	srv.Stop() // fast shutdown: open transactions are rolled back
	srv.Start()

	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit after the restart succeeded")
	}
	_ = tx.Rollback(ctx)
	expectBalances(t, pool, 100, 0)
	if rec, err := store.Get(ctx, "accounts"); !errors.Is(err, fence.ErrNotFound) || rec.Fence != 0 {
		t.Fatalf("fence after the failed transaction: %d, %v; want none", rec.Fence, err)
	}

	// The lease was committed before the restart: it is still there.
	info, err := backend.Inspect(ctx, "transfer")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Owner != a.Owner() || info.Token != a.Token() {
		t.Fatalf("lease after the restart: %s, want A's with token %d", describe(info), a.Token())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Retry with a fresh lease.
	b, err := client.TryAcquire(ctx, "transfer", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	if b.Token() <= a.Token() {
		t.Fatalf("token %d after %d: tokens must survive the restart", b.Token(), a.Token())
	}
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Check(ctx, tx, "accounts", b.Token()); err != nil {
		t.Fatalf("guard check with the fresh lease: %v", err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 30 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 30 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit of the retry: %v", err)
	}
	expectBalances(t, pool, 70, 30)

	// The old token is refused from now on.
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	expectStale(t, "guard check with the old token", guard.Check(ctx, tx, "accounts", a.Token()))
}

func expectBalances(t *testing.T, pool *pgxpool.Pool, want1, want2 int64) {
	t.Helper()
	var b1, b2 int64
	err := pool.QueryRow(testCtx(t), "SELECT (SELECT balance FROM accounts WHERE id = 1), (SELECT balance FROM accounts WHERE id = 2)").Scan(&b1, &b2)
	if err != nil {
		t.Fatal(err)
	}
	if b1 != want1 || b2 != want2 {
		t.Fatalf("balances %d and %d, want %d and %d", b1, b2, want1, want2)
	}
}
