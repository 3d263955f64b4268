package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// A money transfer between two rows of the application's own accounts
// table, fenced with a Guard. Worker A takes the lock and stalls; its lease
// expires, worker B takes the lock and transfers 30; then A wakes up and
// tries to transfer 50 with its old token. The Guard refuses A inside its
// transaction, which rolls back: alice ends with 70 and bob with 30.
//
// It prints:
//
//	B transfers 30: <nil>
//	A's late transfer refused as stale: true
//	alice 70, bob 30
func ExampleGuard() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// fencekit's tables, and the application's own.
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts VALUES ('alice', 100), ('bob', 0)`); err != nil {
		log.Fatal(err)
	}

	locks := lock.New(postgres.NewBackend(pool, nil), nil)
	guard := postgres.NewGuard(nil)

	// transfer moves amount from alice to bob, all or nothing, if the lease's
	// token is still the newest for "accounts".
	transfer := func(lease *lock.Lease, amount int64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// First: raise the fence and lock it until commit, or learn
			// that a newer holder exists (returning the error rolls back).
			if err := guard.Check(ctx, tx, "accounts", lease.Token()); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - $1 WHERE id = 'alice'`, amount); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = 'bob'`, amount)
			return err
		})
	}

	// Worker A takes the lock with a short lease, then stalls.
	a, err := locks.Acquire(ctx, "accounts", 100*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	// Worker B's Acquire waits until A's lease has expired on the database
	// clock, and gets a higher token.
	b, err := locks.Acquire(ctx, "accounts", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B transfers 30:", transfer(b, 30))
	_ = b.Release(ctx)

	// A wakes up, unaware that its lease is gone.
	err = transfer(a, 50)
	fmt.Println("A's late transfer refused as stale:", errors.Is(err, fence.ErrStale))

	var alice, bob int64
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT balance FROM accounts WHERE id = 'alice'),
		(SELECT balance FROM accounts WHERE id = 'bob')`).Scan(&alice, &bob); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("alice %d, bob %d\n", alice, bob)
}

// TestExampleGuard runs ExampleGuard against a real server, in a schema of
// its own, and checks what it prints. (The example has no Output comment,
// because an example cannot skip when no server is available; this test
// can.)
func TestExampleGuard(t *testing.T) {
	exampleDatabaseURL(t)
	got := captureStdout(t, ExampleGuard)
	want := "B transfers 30: <nil>\nA's late transfer refused as stale: true\nalice 70, bob 30\n"
	if got != want {
		t.Fatalf("ExampleGuard printed:\n%s\nwant:\n%s", got, want)
	}
}

// exampleDatabaseURL points DATABASE_URL, which the examples read, at a
// schema of this test's own on the test server.
func exampleDatabaseURL(t *testing.T) {
	t.Helper()
	pool := testkit.Postgres(t)
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	url := testkit.PostgresURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	t.Setenv("DATABASE_URL", url+sep+"search_path="+schema)
}

// captureStdout runs fn with os.Stdout redirected and returns what it wrote.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	finish := func() string {
		os.Stdout = saved
		_ = w.Close()
		return <-out
	}
	finished := false
	defer func() {
		if !finished { // fn panicked or called runtime.Goexit
			finish()
		}
	}()
	fn()
	finished = true
	return finish()
}
