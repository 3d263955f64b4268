//go:build unix

package faulttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	info, err := inspectLock(ctx, backend, "transfer")
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

// Invoices for TestInvoicesSentOnce.
const invoiceCount = 8

// invoiceWorker is a worker process that sends every pending invoice, each
// under a lock of its own, with the read-modify-write recipe named by
// FENCEKIT_FAULTTEST_RECIPE: "raise-first" (UpdateFenced with nothing to
// set, then read, then write) or "read-then-write" (the recipe
// docs/postgres.md used to show). Sending is a row in sends, inserted in the
// transaction of the fenced status update, so a refused update sends
// nothing.
//
// For invoice FENCEKIT_FAULTTEST_HOLD it prints "read <token>" after reading
// "pending" and waits for a line on stdin before writing; then it writes at
// once, with a context that the lost lease does not cancel (a write already
// under way when the process froze), and prints "write ok", "write stale"
// or "write refused ...". It prints "done" at the end.
func invoiceWorker() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ttl, err := time.ParseDuration(os.Getenv("FENCEKIT_FAULTTEST_TTL"))
	if err != nil {
		return workerFail("ttl: %v", err)
	}
	hold, _ := strconv.Atoi(os.Getenv("FENCEKIT_FAULTTEST_HOLD"))
	raiseFirst := os.Getenv("FENCEKIT_FAULTTEST_RECIPE") == "raise-first"
	pool, err := pgxpool.New(ctx, os.Getenv("FENCEKIT_FAULTTEST_URL")) // pgx's default options
	if err != nil {
		return workerFail("%v", err)
	}
	defer pool.Close()
	client := lock.New(postgres.NewBackend(pool, nil), nil)
	stdin := bufio.NewReader(os.Stdin)
	for id := 1; id <= invoiceCount; id++ {
		row := postgres.Row{Table: pgx.Identifier{"invoices"}, Key: postgres.Match{"id": id}}
		err := client.Do(ctx, fmt.Sprintf("invoice-%d", id), ttl, func(lctx context.Context, lease *lock.Lease) error {
			if raiseFirst {
				// The barrier: from now on every older holder is refused.
				if err := postgres.UpdateFenced(lctx, pool, row, lease.Token(), nil); err != nil {
					return err
				}
			}
			var status string
			if err := pool.QueryRow(lctx, `SELECT status FROM invoices WHERE id = $1`, id).Scan(&status); err != nil {
				return err
			}
			if status != "pending" {
				return nil
			}
			wctx := lctx
			if id == hold {
				fmt.Printf("read %d\n", lease.Token())
				if line, err := stdin.ReadString('\n'); err != nil || line != "write\n" {
					return fmt.Errorf("stdin: %q, %v", line, err)
				}
				wctx = ctx
			}
			err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(wctx, `INSERT INTO sends (invoice, token) VALUES ($1, $2)`, id, int64(lease.Token())); err != nil {
					return err
				}
				return postgres.UpdateFenced(wctx, tx, row, lease.Token(), map[string]any{"status": "sent"})
			})
			if id == hold {
				switch {
				case err == nil:
					fmt.Println("write ok")
				case errors.Is(err, fence.ErrStale):
					fmt.Println("write stale")
				default:
					fmt.Printf("write refused %v\n", err)
				}
			}
			return err
		})
		// A stale write or a lost lease is this recipe doing its job; the
		// invoice is someone else's. Anything else is a failure.
		if err != nil && !errors.Is(err, fence.ErrStale) && !errors.Is(err, lock.ErrLost) {
			return workerFail("invoice %d: %v", id, err)
		}
	}
	fmt.Println("done")
	return 0
}

// Three worker processes send eight invoices. Worker A reads invoice 1 as
// "pending" and is frozen with SIGSTOP (keep-alive included: a time.Sleep
// under keep-alive is no pause, the lease would stay alive) until its lease
// has expired; worker B takes the lock with a higher token and reads
// "pending" too; then A is continued and writes at once, before B writes.
// Worker C, started once B holds invoice 1, competes with A and B for every
// invoice.
//
// With the raise-first recipe every invoice is sent exactly once: B's raise
// made A's late write stale. With the recipe docs/postgres.md used to show
// (read, then write), invoice 1 is sent twice.
func TestInvoicesSentOnce(t *testing.T) {
	for _, tc := range []struct {
		recipe    string
		lateWrite string
		sentTwice int // the invoice sent twice; 0 for none
	}{
		{"raise-first", "write stale", 0},
		{"read-then-write", "write ok", 1},
	} {
		t.Run(tc.recipe, func(t *testing.T) {
			ctx := testCtx(t)
			pool := testkit.Postgres(t)
			if err := postgres.Migrate(ctx, pool, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL, fence bigint);
				CREATE TABLE sends (invoice int NOT NULL, token bigint NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO invoices SELECT i, 'pending', NULL FROM generate_series(1, $1::int) AS i`, invoiceCount); err != nil {
				t.Fatal(err)
			}
			var schema string
			if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(testkit.PostgresURL(t))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			// Generous for a loaded machine: the workers' leases must not
			// expire unless they are frozen.
			const ttl = 2 * time.Second
			worker := func(hold int) *workerProcess {
				return startWorker(t, "invoices", map[string]string{
					"FENCEKIT_FAULTTEST_URL":    u.String(),
					"FENCEKIT_FAULTTEST_TTL":    ttl.String(),
					"FENCEKIT_FAULTTEST_HOLD":   strconv.Itoa(hold),
					"FENCEKIT_FAULTTEST_RECIPE": tc.recipe,
				})
			}

			a := worker(1)
			tokA := a.expectToken("read ")
			a.stop()
			a.say("write") // read first thing once continued

			b := worker(1)
			tokB := b.expectToken("read ") // after A's lease expired
			if tokB <= tokA {
				t.Fatalf("B's token %d is not above A's %d", tokB, tokA)
			}
			// Started now, so that it cannot take invoice 1 before B.
			c := worker(0)
			a.cont()
			if got := a.next("A's late write"); got != tc.lateWrite {
				t.Fatalf("A's late write: %q, want %q", got, tc.lateWrite)
			}
			b.say("write")
			if got := b.next("B's write"); got != "write ok" {
				t.Fatalf("B's write: %q, want it accepted", got)
			}
			for _, w := range []*workerProcess{a, b, c} {
				if got := w.next("the end"); got != "done" {
					t.Fatalf("worker said %q, want done", got)
				}
				w.wait()
			}

			rows, err := pool.Query(ctx, `SELECT i.id, i.status, count(s.invoice) FROM invoices i LEFT JOIN sends s ON s.invoice = i.id GROUP BY i.id, i.status ORDER BY i.id`)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				id     int
				status string
				sends  int
			}
			results, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (r result, err error) {
				err = row.Scan(&r.id, &r.status, &r.sends)
				return r, err
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range results {
				want := 1
				if r.id == tc.sentTwice {
					want = 2 // the double send of the old recipe
				}
				if r.status != "sent" || r.sends != want {
					t.Errorf("invoice %d: %s, sent %d times; want sent %d time(s)", r.id, r.status, r.sends, want)
				}
			}
			t.Logf("A's token %d, B's %d; %d invoices checked", tokA, tokB, len(results))
		})
	}
}
