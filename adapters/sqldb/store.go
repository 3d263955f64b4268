package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// Store is a fence.Store on a table of (key, value, fence) rows, over
// database/sql. A NULL value is a key without value: deleted (a tombstone
// that keeps its fence) or only advanced.
//
// Each write is one statement that compares the token with the row's fence
// and writes in the same step, under the row lock the statement takes:
//
//   - MySQL: INSERT ... ON DUPLICATE KEY UPDATE whose assignments are
//     conditional on fence <= token, the fence assigned last (MySQL
//     evaluates assignments left to right, each seeing the ones before).
//     A refused write records the current fence with LAST_INSERT_ID(fence),
//     which the server returns in the statement's reply (Result's
//     LastInsertId): so the outcome never depends on the affected-rows
//     count, which reads "no change because equal" as 0 without
//     CLIENT_FOUND_ROWS and "refused" as 1 with it.
//   - PostgreSQL: INSERT ... ON CONFLICT DO UPDATE ... WHERE fence <=
//     token RETURNING, as adapters/postgres; a refusal costs a second
//     statement that reads the fence.
//
// An autocommit write that the server ends as a deadlock or lock wait
// timeout was undone whole, so Store runs it again (three attempts in all)
// before it returns a *ConflictError.
type Store struct {
	db     *sql.DB
	f      *fencer
	packet packetLimit // MySQL's max_allowed_packet, for Put
}

// NewStore returns a Store on db in dialect d, with the table named in
// opts (nil for the default fencekit_store). The table must exist (see
// Migrate). An unknown dialect, a malformed table name or a nil db is
// reported by every method as an error matching fence.ErrInvalid, before
// anything is sent.
func NewStore(db *sql.DB, d Dialect, opts *Options) *Store {
	s := &Store{db: db, f: newFencer(d, opts)}
	if db == nil && s.f.err == nil {
		s.f.err = fence.Invalid("sqldb: nil *sql.DB")
	}
	return s
}

// Put writes value under key if token >= the key's fence, and raises the
// fence to token. A nil value is stored as an empty value.
//
// On MySQL a value whose statement would exceed the server's
// max_allowed_packet (read once per Store, when the first value of 1 KiB or
// more is written) is refused with an error matching ErrValueTooLarge and
// fence.ErrInvalid, before anything is sent. The statement's size is
// counted with the value escaped as go-sql-driver/mysql's
// interpolateParams does, so the largest value is a little under
// max_allowed_packet (half of it at worst, for a value made of characters
// that need escaping).
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if value == nil {
		value = []byte{} // NULL is reserved for "no value"
	}
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if err := s.checkPacket(ctx, key, value); err != nil {
		return err
	}
	return s.f.write(ctx, s.db, true, "put", s.f.put, key, token, value)
}

// Delete removes key's value if token >= its fence, keeping the row and its
// fence (raised to token) as a tombstone, so that an older token can never
// re-create the key. Deleting a missing key leaves such a tombstone.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.f.write(ctx, s.db, true, "delete", s.f.del, key, token, nil)
}

// Advance raises key's fence to token if token >= it, keeping the value. On
// a missing key it creates a row without value.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.f.write(ctx, s.db, true, "advance", s.f.adv, key, token, nil)
}

// Get returns key's value and fence. When the key holds no value the error
// matches fence.ErrNotFound and the Record still carries the fence (0 for a
// key never written). An empty value is returned as a non-nil empty slice.
func (s *Store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	if s.f.err != nil {
		return fence.Record{}, s.f.err
	}
	if err := ctx.Err(); err != nil {
		return fence.Record{}, err
	}
	var (
		missing bool
		value   []byte
		f       int64
	)
	err := s.db.QueryRowContext(ctx, s.f.get, key).Scan(&missing, &value, &f)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fence.Record{}, notFound(key)
	case err != nil:
		return fence.Record{}, classify(ctx, s.f.d, s.f.table, fixMigrate, fmt.Sprintf("get %q", key), err)
	case missing:
		return fence.Record{Fence: fence.Token(f)}, notFound(key)
	}
	if value == nil {
		value = []byte{}
	}
	return fence.Record{Value: value, Fence: fence.Token(f)}, nil
}

func notFound(key string) error {
	return fmt.Errorf("sqldb: %q: %w", key, fence.ErrNotFound)
}

// execer is what a fenced write runs on: *sql.DB for Store, *sql.Tx for
// Guard.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

var (
	_ execer = (*sql.DB)(nil)
	_ execer = (*sql.Tx)(nil)

	_ fence.Store = (*Store)(nil)
)

// fencer holds the fenced statements on one store table. Store runs them on
// its *sql.DB; Guard on the caller's *sql.Tx.
type fencer struct {
	d                         Dialect
	table                     string // quoted, for messages
	err                       error  // a bad dialect or table name, reported on use
	put, del, adv, get, fence string
}

func newFencer(d Dialect, opts *Options) *fencer {
	table, _, err := opts.tables(d)
	if err != nil {
		return &fencer{err: err}
	}
	f := &fencer{d: d, table: table}
	if d == MySQL {
		// Insert the key with the new fence, or, on the existing row,
		// assign each column only when fence <= token, the fence last so
		// that the conditions before it still see the old fence. A refusal
		// evaluates LAST_INSERT_ID(fence), which puts the current fence in
		// the reply; an applied write leaves it 0 (the table has no
		// AUTO_INCREMENT column).
		upsert := func(insertValue, set string) string {
			return fmt.Sprintf("INSERT INTO %s (`key`, `value`, `fence`) VALUES (?, %s, ?)\n"+
				"ON DUPLICATE KEY UPDATE %s`fence` = IF(`fence` <= ?, ?, LAST_INSERT_ID(`fence`))", table, insertValue, set)
		}
		f.put = upsert("?", "`value` = IF(`fence` <= ?, VALUES(`value`), `value`), ")
		f.del = upsert("NULL", "`value` = IF(`fence` <= ?, NULL, `value`), ")
		f.adv = upsert("NULL", "")
		f.get = fmt.Sprintf("SELECT `value` IS NULL, `value`, `fence` FROM %s WHERE `key` = ?", table)
		return f
	}
	upsert := func(insertValue, set string) string {
		return fmt.Sprintf(`INSERT INTO %[1]s AS t (key, value, fence) VALUES ($1, %[2]s, $2)
ON CONFLICT (key) DO UPDATE SET %[3]s
WHERE t.fence <= EXCLUDED.fence
RETURNING t.fence`, table, insertValue, set)
	}
	f.put = upsert("$3::bytea", "value = EXCLUDED.value, fence = EXCLUDED.fence")
	f.del = upsert("NULL", "value = NULL, fence = EXCLUDED.fence")
	f.adv = upsert("NULL", "fence = EXCLUDED.fence")
	f.get = fmt.Sprintf(`SELECT value IS NULL, value, fence FROM %s WHERE key = $1`, table)
	f.fence = fmt.Sprintf(`SELECT fence FROM %s WHERE key = $1`, table)
	return f
}

// write runs one of the fenced upserts on db. autocommit says that db runs
// each statement as its own transaction (a *sql.DB), so that a statement
// ended by a conflict can be run again.
func (f *fencer) write(ctx context.Context, db execer, autocommit bool, op, query, key string, token fence.Token, value []byte) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if f.err != nil {
		return f.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	where := fmt.Sprintf("%s %q", op, key)
	for attempt := 1; ; attempt++ {
		var err error
		if f.d == MySQL {
			err = f.writeMySQL(ctx, db, query, key, token, value)
		} else {
			err = f.writePostgres(ctx, db, query, key, token, value)
		}
		var stale *fence.StaleError
		switch {
		case err == nil, errors.As(err, &stale):
			return err
		case autocommit && attempt < 3 && isConflict(err) && ctx.Err() == nil:
			continue
		}
		return classify(ctx, f.d, f.table, fixMigrate, where, err)
	}
}

// writeMySQL runs one MySQL upsert and reads its outcome from the reply.
func (f *fencer) writeMySQL(ctx context.Context, db execer, query, key string, token fence.Token, value []byte) error {
	t := int64(token)
	var args []any
	switch {
	case value != nil: // put: key, value, token | value cond, fence cond, fence
		args = []any{key, value, t, t, t, t}
	case query == f.del: // key, token | value cond, fence cond, fence
		args = []any{key, t, t, t, t}
	default: // advance: key, token | fence cond, fence
		args = []any{key, t, t, t}
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	current, err := res.LastInsertId()
	if err != nil {
		return err
	}
	switch {
	case current == 0:
		return nil
	case fence.Token(current) > token:
		return fence.Stale(key, token, fence.Token(current))
	}
	return fmt.Errorf("the server reported fence %d for a refused token %d; is LAST_INSERT_ID in use by a trigger on the table?", current, token)
}

// writePostgres runs one PostgreSQL upsert; no row back means refused, and
// a second statement reads the fence for the StaleError.
func (f *fencer) writePostgres(ctx context.Context, db execer, query, key string, token fence.Token, value []byte) error {
	args := []any{key, int64(token)}
	if value != nil {
		args = append(args, value)
	}
	for attempt := 1; ; attempt++ {
		var got int64
		err := db.QueryRowContext(ctx, query, args...).Scan(&got)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var current int64
		err = db.QueryRowContext(ctx, f.fence, key).Scan(&current)
		switch {
		case err == nil && fence.Token(current) > token:
			return fence.Stale(key, token, fence.Token(current))
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return err
		case attempt >= 3:
			return fmt.Errorf("token %d refused, but the fence is now %d; is something else changing the table?", token, current)
		}
	}
}
