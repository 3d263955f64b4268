package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
)

// Store is a fence.Store on a PostgreSQL table of (key, value, fence) rows.
// A nil value column is a key without value: deleted (a tombstone that keeps
// its fence) or only advanced.
//
// Each write is one statement, INSERT ... ON CONFLICT (key) DO UPDATE ...
// WHERE fence <= token, so the comparison and the write are atomic under any
// isolation level. A refused write costs a second statement that reads the
// fence for the *fence.StaleError.
//
// Pass a pgx.Tx as the DB to make the writes part of a transaction; the row
// lock of each write is then held until that transaction ends.
type Store struct {
	db DB
	f  *fencer
}

// NewStore returns a Store on db with the table named in opts (nil for the
// default fencekit_store). The table must exist (see Migrate). A malformed
// table name or a nil db is reported by every method as an error matching
// fence.ErrInvalid.
func NewStore(db DB, opts *Options) *Store {
	s := &Store{db: db, f: newFencer(opts)}
	if db == nil && s.f.err == nil {
		s.f.err = fence.Invalid("postgres: nil DB")
	}
	return s
}

// Put writes value under key if token >= the key's fence, and raises the
// fence to token. A nil value is stored as an empty value.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if value == nil {
		value = []byte{} // NULL is reserved for "no value"
	}
	return s.f.write(ctx, s.db, "put", s.f.put, key, token, value)
}

// Delete removes key's value if token >= its fence, keeping the row and its
// fence (raised to token) as a tombstone, so that an older token can never
// re-create the key. Deleting a missing key leaves such a tombstone.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.f.write(ctx, s.db, "delete", s.f.del, key, token, nil)
}

// Advance raises key's fence to token if token >= it, keeping the value. On
// a missing key it creates a row without value.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.f.write(ctx, s.db, "advance", s.f.adv, key, token, nil)
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
	err := s.db.QueryRow(ctx, s.f.get, key).Scan(&missing, &value, &f)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fence.Record{}, notFound(key)
	case err != nil:
		return fence.Record{}, wrapTableErr(s.f.table, fixMigrate, fmt.Sprintf("get %q", key), err)
	case missing:
		return fence.Record{Fence: fence.Token(f)}, notFound(key)
	}
	if value == nil {
		value = []byte{}
	}
	return fence.Record{Value: value, Fence: fence.Token(f)}, nil
}

func notFound(key string) error {
	return fmt.Errorf("postgres: %q: %w", key, fence.ErrNotFound)
}

// fencer holds the fenced statements on one store table. Store runs them on
// its DB; Guard on the caller's transaction.
type fencer struct {
	table                     string // sanitized, for messages
	err                       error  // a malformed table name, reported on use
	put, del, adv, get, fence string
}

func newFencer(opts *Options) *fencer {
	table, _, err := opts.tables()
	if err != nil {
		return &fencer{err: err}
	}
	// One shape for the three writes: insert the key with the new fence, or
	// update the existing row when its fence is at most the token. The row
	// lock ON CONFLICT takes makes the comparison and the write atomic, and
	// under READ COMMITTED the WHERE clause is re-checked on the newest row
	// version. No row back means the token was refused.
	upsert := func(insertValue, set string) string {
		return fmt.Sprintf(`INSERT INTO %[1]s AS t (key, value, fence) VALUES ($1, %[2]s, $2)
ON CONFLICT (key) DO UPDATE SET %[3]s
WHERE t.fence <= EXCLUDED.fence
RETURNING t.fence`, table, insertValue, set)
	}
	return &fencer{
		table: table,
		put:   upsert("$3::bytea", "value = EXCLUDED.value, fence = EXCLUDED.fence"),
		del:   upsert("NULL", "value = NULL, fence = EXCLUDED.fence"),
		adv:   upsert("NULL", "fence = EXCLUDED.fence"),
		get:   fmt.Sprintf(`SELECT value IS NULL, value, fence FROM %s WHERE key = $1`, table),
		fence: fmt.Sprintf(`SELECT fence FROM %s WHERE key = $1`, table),
	}
}

// write runs one of the fenced upserts on db. value is passed as $3 when
// query uses it (put).
func (f *fencer) write(ctx context.Context, db DB, op, query, key string, token fence.Token, value []byte) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if f.err != nil {
		return f.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	args := make([]any, 2, 3)
	args[0], args[1] = key, int64(token)
	if value != nil {
		args = append(args, value)
	}
	// A refusal is followed by a read of the fence. Fences only rise, so that
	// read sees a fence above the token, unless someone removed or lowered
	// the row behind our back in between; then the write is simply tried
	// again.
	for attempt := 1; ; attempt++ {
		var got int64
		err := db.QueryRow(ctx, query, args...).Scan(&got)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return wrapTableErr(f.table, fixMigrate, fmt.Sprintf("%s %q", op, key), err)
		}
		var current int64
		err = db.QueryRow(ctx, f.fence, key).Scan(&current)
		switch {
		case err == nil && fence.Token(current) > token:
			return fence.Stale(key, token, fence.Token(current))
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return wrapTableErr(f.table, fixMigrate, fmt.Sprintf("%s %q: read fence", op, key), err)
		case attempt >= 3:
			return fmt.Errorf("postgres: %s %q: token %d refused, but the fence is now %d; is something else changing the table?", op, key, token, current)
		}
	}
}
