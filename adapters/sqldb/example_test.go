package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/exampletest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// A money transfer between two rows of the application's own accounts
// table on MySQL or MariaDB, with plain database/sql, fenced with a Guard.
// Worker A takes the lock and stalls; its lease expires, worker B takes the
// lock and transfers 30; then A wakes up and tries to transfer 50 with its
// old token. The Guard refuses A inside its transaction, which rolls back:
// alice ends with 70 and bob with 30.
//
// The transaction raises the fence first, then reads, then writes: the read
// is then done under the fence's row lock, so no older holder can commit in
// between. The example is idempotent, so it runs again and again on the
// same database.
func ExampleGuard() {
	ctx := context.Background()
	db, err := sql.Open("mysql", exampleDSN) // e.g. "app:secret@tcp(db:3306)/app"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// fencekit's tables, and the application's own.
	if err := sqldb.Migrate(ctx, db, sqldb.MySQL, nil); err != nil {
		log.Fatal(err)
	}
	for _, stmt := range []string{
		"CREATE TABLE IF NOT EXISTS accounts (id VARCHAR(16) PRIMARY KEY, balance BIGINT NOT NULL)",
		"INSERT INTO accounts VALUES ('alice', 100), ('bob', 0) ON DUPLICATE KEY UPDATE balance = VALUES(balance)",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			log.Fatal(err)
		}
	}

	locks := lock.New(sqldb.NewBackend(db, sqldb.MySQL, nil), nil)
	guard := sqldb.NewGuard(sqldb.MySQL, nil)

	// transfer moves amount from alice to bob, all or nothing, if the
	// lease's token is still the newest for "accounts".
	transfer := func(lease *lock.Lease, amount int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		// First: raise the fence and lock it until commit, or learn that a
		// newer holder exists.
		if err := guard.Check(ctx, tx, "accounts", lease.Token()); err != nil {
			return err
		}
		var balance int64
		if err := tx.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 'alice' FOR UPDATE").Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return errors.New("insufficient funds")
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = ? WHERE id = 'alice'", balance-amount); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = 'bob'", amount); err != nil {
			return err
		}
		return tx.Commit()
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
	if err := db.QueryRowContext(ctx, "SELECT (SELECT balance FROM accounts WHERE id = 'alice'), (SELECT balance FROM accounts WHERE id = 'bob')").Scan(&alice, &bob); err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice:", alice, "bob:", bob)
	// Output:
	// B transfers 30: <nil>
	// A's late transfer refused as stale: true
	// alice: 70 bob: 30
}

// exampleDSN is the database the examples use: a fresh database on
// FENCEKIT_MYSQL_URL's server (else the test binary's throwaway mariadbd,
// testkit.SharedMySQLURL). TestMain sets it; TestExamplesTwice points
// it elsewhere.
var exampleDSN string

// TestMain prepares the examples' database. Examples cannot skip
// themselves, so without a server they are skipped here with a note, unless
// FENCEKIT_REQUIRE_BACKENDS=1, under which they run and fail.
func TestMain(m *testing.M) {
	flag.Parse()
	dsn, err := testkit.SharedMySQLURL() // FENCEKIT_MYSQL_URL, else a throwaway mariadbd
	drop := func() {}
	if err == nil {
		drop, err = exampleDatabase(dsn)
	}
	if err != nil && os.Getenv(testkit.RequireEnv) != "1" {
		fmt.Fprintf(os.Stderr, "adapters/sqldb: examples skipped (%v); set %s or install the MariaDB server\n", err, testkit.MySQLURLEnv)
		skip := "^ExampleGuard$"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	code := m.Run()
	drop()
	os.Exit(code)
}

// exampleDatabase creates a database on the server at dsn, points
// exampleDSN at it, and returns a function that drops it.
func exampleDatabase(dsn string) (drop func(), err error) {
	drop = func() {}
	if dsn == "" {
		return drop, errors.New("no server named")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return drop, err
	}
	owner, err := lock.NewOwner()
	if err != nil {
		return drop, err
	}
	name := "fk_example_" + owner[:12]
	admin := cfg.Clone()
	admin.DBName = ""
	conn, err := mysql.NewConnector(admin)
	if err != nil {
		return drop, err
	}
	db := sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		_ = db.Close()
		return drop, err
	}
	cfg.DBName = name
	exampleDSN = cfg.FormatDSN()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP DATABASE `"+name+"`")
		_ = db.Close()
	}, nil
}

// TestExamplesTwice runs every example twice in one process, in a database
// of its own (from testkit, so also without FENCEKIT_MYSQL_URL), and checks
// both runs' output against the Output comments.
func TestExamplesTwice(t *testing.T) {
	saved := exampleDSN
	t.Cleanup(func() { exampleDSN = saved })
	exampleDSN = testkit.MySQLConfig(t).FormatDSN()
	exampletest.RunTwice(t, map[string]func(){
		"ExampleGuard": ExampleGuard,
	})
}
