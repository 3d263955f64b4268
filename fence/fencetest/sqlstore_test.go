package fencetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
)

// sqlStore is the worked example of docs/conformance.md: a fence.Store over
// database/sql, each write one statement that compares and writes.
type sqlStore struct {
	db    *sql.DB
	table string // a trusted identifier, never user input
}

var _ fence.Store = (*sqlStore)(nil)

// upsert raises the fence (and sets the value, per set) iff token >= fence;
// no row back means refused.
const upsert = `INSERT INTO %[1]s AS t (key, value, fence) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET %[2]s, fence = EXCLUDED.fence
WHERE t.fence <= EXCLUDED.fence RETURNING t.fence`

func (s *sqlStore) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if value == nil {
		value = []byte{} // NULL means "no value"
	}
	return s.write(ctx, key, token, value, "value = EXCLUDED.value")
}

func (s *sqlStore) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, key, token, nil, "value = NULL")
}

func (s *sqlStore) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, key, token, nil, "value = t.value")
}

func (s *sqlStore) write(ctx context.Context, key string, token fence.Token, value []byte, set string) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	var f int64
	err := s.db.QueryRowContext(ctx, fmt.Sprintf(upsert, s.table, set), key, value, int64(token)).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		rec, gerr := s.Get(ctx, key)
		if gerr != nil && !errors.Is(gerr, fence.ErrNotFound) {
			return gerr
		}
		return fence.Stale(key, token, rec.Fence)
	}
	return err
}

func (s *sqlStore) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	var value []byte
	var f int64
	err := s.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT value, fence FROM %s WHERE key = $1`, s.table), key).Scan(&value, &f)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fence.Record{}, fence.ErrNotFound
	case err != nil:
		return fence.Record{}, err
	case value == nil:
		return fence.Record{Fence: fence.Token(f)}, fence.ErrNotFound
	}
	return fence.Record{Value: value, Fence: fence.Token(f)}, nil
}

// checkThenWrite is the same table written the way the issue found in the
// field: read the fence, then write without a row lock (no FOR UPDATE), in
// a transaction at READ COMMITTED.
type checkThenWrite struct{ *sqlStore }

func (s checkThenWrite) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	var f int64
	err = tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT fence FROM %s WHERE key = $1`, s.table), key).Scan(&f)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if token < fence.Token(f) {
		return fence.Stale(key, token, fence.Token(f))
	}
	_, err = tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (key, value, fence) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence`, s.table), key, append([]byte{}, value...), int64(token))
	if err != nil {
		return err
	}
	return tx.Commit()
}

// newSQLStore opens the PostgreSQL server of the environment through
// database/sql with the driver's default options, in a table of its own.
func newSQLStore(t *testing.T) *sqlStore {
	t.Helper()
	db, err := sql.Open("pgx", testkit.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := &sqlStore{db: db, table: "fencetest_" + testkit.Namespace(t)}
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s (key text PRIMARY KEY, value bytea, fence bigint NOT NULL)`, s.table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+s.table) })
	return s
}

// TestSQLStoreExample runs both kits on the worked example, as its author
// would.
func TestSQLStoreExample(t *testing.T) {
	s := newSQLStore(t)
	fencetest.Run(t, func(*testing.T) fence.Store { return s })
	fencetest.Linearizable(t, s, nil)
}

// TestSQLCheckThenWriteCaught shows the race check catching the unlocked
// check-then-write on a real server, in every run.
func TestSQLCheckThenWriteCaught(t *testing.T) {
	s := checkThenWrite{newSQLStore(t)}
	for _, c := range fencetest.Checks() {
		if c.Name != "ConcurrentWritersHighestWins" {
			continue
		}
		for i := range 5 {
			if err := c.Run(t.Context(), s, fencetest.Namespace()); err == nil {
				t.Fatalf("run %d: %s passed on a check-then-write without a row lock", i+1, c.Name)
			} else if i == 0 {
				t.Logf("caught: %v", err)
			}
		}
	}
}
