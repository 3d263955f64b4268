package postgres_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/exampletest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// A money transfer between two rows of the application's own accounts
// table, fenced with a Guard. Worker A takes the lock and stalls; its lease
// expires, worker B takes the lock and transfers 30; then A wakes up and
// tries to transfer 50 with its old token. The Guard refuses A inside its
// transaction, which rolls back: alice ends with 70 and bob with 30.
//
// The example is idempotent: it creates its table only if missing and resets
// the balances, so it runs again and again on the same database.
func ExampleGuard() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleURL) // e.g. os.Getenv("DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// fencekit's tables, and the application's own.
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (id text PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts VALUES ('alice', 100), ('bob', 0)
		ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance`); err != nil {
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
	// Output:
	// B transfers 30: <nil>
	// A's late transfer refused as stale: true
	// alice 70, bob 30
}

// A read-modify-write on a row of the application's own table, fenced by a
// column of the row (the version-column recipe): raise the fence first, then
// read, then write. Worker A raises the fence and reads "pending", then
// stalls past its lease; worker B raises the fence above A's token, reads
// "pending" and marks the invoice sent. A's late write is refused, so the
// invoice is sent once.
func ExampleUpdateFenced() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleURL) // e.g. os.Getenv("DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		log.Fatal(err)
	}
	// The application's table, with a fence column (NULL counts as 0).
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (id bigint PRIMARY KEY, status text NOT NULL, fence bigint);
		INSERT INTO invoices (id, status) VALUES (42, 'pending')
		ON CONFLICT (id) DO UPDATE SET status = 'pending'`); err != nil {
		log.Fatal(err)
	}
	locks := lock.New(postgres.NewBackend(pool, nil), nil)
	row := postgres.Row{Table: pgx.Identifier{"invoices"}, Key: postgres.Match{"id": 42}}

	// raiseAndRead is steps 1 and 2: the barrier (an update that sets
	// nothing but the fence), then the read.
	raiseAndRead := func(lease *lock.Lease) string {
		if err := postgres.UpdateFenced(ctx, pool, row, lease.Token(), nil); err != nil {
			return err.Error()
		}
		var status string
		if err := pool.QueryRow(ctx, `SELECT status FROM invoices WHERE id = 42`).Scan(&status); err != nil {
			log.Fatal(err)
		}
		return status
	}
	send := func(lease *lock.Lease) error { // step 3
		return postgres.UpdateFenced(ctx, pool, row, lease.Token(), map[string]any{"status": "sent"})
	}

	a, err := locks.Acquire(ctx, "invoice/42", 100*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A reads:", raiseAndRead(a))
	// A stalls; B's Acquire waits until A's lease has expired.
	b, err := locks.Acquire(ctx, "invoice/42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Release(ctx)
	fmt.Println("B reads:", raiseAndRead(b))
	fmt.Println("B sends:", send(b))

	err = send(a) // A wakes up and acts on its out-of-date read
	fmt.Println("A's late send refused as stale:", errors.Is(err, fence.ErrStale))
	// Output:
	// A reads: pending
	// B reads: pending
	// B sends: <nil>
	// A's late send refused as stale: true
}

// exampleURL is the database the examples use: FENCEKIT_POSTGRES_URL (else
// the test binary's throwaway server, testkit.SharedPostgresURL), with a
// schema of this process's own as search_path, so that concurrent runs never
// share a table. TestMain sets it; TestExamplesTwice points it elsewhere.
var exampleURL string

// exampleServerNeeded matches the examples that need a server.
const exampleServerNeeded = "^Example(Guard|UpdateFenced|Backend_Sweep)$"

// TestMain prepares the examples' database. Examples cannot skip
// themselves, so without a server they are skipped here with a note, unless
// FENCEKIT_REQUIRE_BACKENDS=1, under which they run and fail.
func TestMain(m *testing.M) {
	flag.Parse()
	url, err := testkit.SharedPostgresURL() // FENCEKIT_POSTGRES_URL, else a throwaway server
	drop := func() {}
	if err == nil {
		drop, err = exampleSchema(url)
	}
	if err != nil && os.Getenv(testkit.RequireEnv) != "1" {
		fmt.Fprintf(os.Stderr, "adapters/postgres: examples skipped (%v); set %s or install the PostgreSQL server\n", err, testkit.PostgresURLEnv)
		skip := exampleServerNeeded
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	code := m.Run()
	drop()
	os.Exit(code)
}

// exampleSchema creates a fresh schema on the server at url, points
// exampleURL at it, and returns a function that drops it.
func exampleSchema(url string) (drop func(), err error) {
	drop = func() {}
	if url == "" {
		return drop, errors.New("no server named")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return drop, err
	}
	defer conn.Close(context.Background())
	owner, err := lock.NewOwner()
	if err != nil {
		return drop, err
	}
	schema := pgx.Identifier{"fk_example_" + owner[:12]}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema.Sanitize()); err != nil {
		return drop, err
	}
	exampleURL = withSearchPath(url, schema[0])
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, url); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA "+schema.Sanitize()+" CASCADE")
			_ = conn.Close(ctx)
		}
	}, nil
}

// withSearchPath returns url with search_path set to schema.
func withSearchPath(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}

// TestExamplesTwice runs every example twice in one process, in a schema of
// its own (from testkit, so also without FENCEKIT_POSTGRES_URL), and checks
// both runs' output against the Output comments: the examples are
// idempotent, as `go test -count=2` needs.
func TestExamplesTwice(t *testing.T) {
	pool := testkit.Postgres(t)
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	saved := exampleURL
	t.Cleanup(func() { exampleURL = saved })
	exampleURL = withSearchPath(testkit.PostgresURL(t), schema)

	exampletest.RunTwice(t, map[string]func(){
		"ExampleGuard":         ExampleGuard,
		"ExampleUpdateFenced":  ExampleUpdateFenced,
		"ExampleBackend_Sweep": ExampleBackend_Sweep,
	})
}
