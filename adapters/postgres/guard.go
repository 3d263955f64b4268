package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
)

// Guard fences a caller's own transaction, whatever tables it writes. Call
// Check inside the transaction with the lease's token before committing
// (best: first). Check raises the resource's fence in the store table and
// keeps that row locked until the transaction ends, so a holder with an
// older token is refused, and a newer holder's Check waits until this
// transaction has committed or rolled back.
//
// Resources are rows of the store table (Options.StoreTable), so they share
// the key space and fences of a Store on the same table: Check(resource, t)
// is Store.Advance(resource, t) run inside the transaction.
type Guard struct {
	f *fencer
}

// NewGuard returns a Guard on the store table named in opts (nil for the
// default fencekit_store; see Migrate).
func NewGuard(opts *Options) *Guard { return &Guard{f: newFencer(opts)} }

// Check raises resource's fence to token inside tx, and holds the row lock
// until tx ends. When token is older than the fence it returns a
// *fence.StaleError (matching fence.ErrStale) and changes nothing: roll tx
// back, since another holder has taken over. Under REPEATABLE READ or
// SERIALIZABLE a concurrent Check can make it fail with a *ConflictError
// instead; roll back and retry then too.
//
// tx should be a transaction (pgx.Tx): on a pool or a connection outside a
// transaction, the fence is raised but no lock outlives the call.
func (g *Guard) Check(ctx context.Context, tx DB, resource string, token fence.Token) error {
	if tx == nil {
		return fence.Invalid("postgres: guard check: nil transaction")
	}
	return g.f.write(ctx, tx, "guard check", g.f.adv, resource, token, nil)
}

// Row names one row of the caller's own table that carries a fence column:
// the version-column recipe, for UpdateFenced.
//
// The fence column is a bigint holding the highest token that has written
// the row; NULL counts as 0, so existing rows can take the column without a
// backfill: ALTER TABLE accounts ADD COLUMN fence bigint.
type Row struct {
	// Table is the table, optionally schema-qualified.
	Table pgx.Identifier
	// KeyColumn identifies the row; default "id".
	KeyColumn string
	// Key is the KeyColumn value of the row.
	Key any
	// FenceColumn is the fence column; default "fence".
	FenceColumn string
}

// UpdateFenced sets the columns in set on one row, and its fence column to
// token, in one statement that applies only if the row's fence is at most
// token:
//
//	UPDATE t SET col = $1, ..., fence = $n WHERE id = $m AND coalesce(fence, 0) <= $n
//
// Column and table names are quoted as identifiers; every value is a
// parameter. When the row's fence is above token it returns an error
// matching fence.ErrStale (errors.As gives the *fence.StaleError, whose Key
// is the row's key printed with %v); when the row does not exist, one
// matching fence.ErrNotFound. An empty set only raises the fence.
//
// Run it on a pgx.Tx to fence several rows in one transaction; the rows stay
// locked until it ends.
func UpdateFenced(ctx context.Context, db DB, row Row, token fence.Token, set map[string]any) error {
	if db == nil {
		return fence.Invalid("postgres: update: nil DB")
	}
	if !token.Valid() {
		return fence.Invalid("token %d is outside 1..%d", token, fence.MaxToken)
	}
	query, lookup, args, err := row.updateSQL(set)
	if err != nil {
		return err
	}
	args = append(args, int64(token), row.Key)
	if err := ctx.Err(); err != nil {
		return err
	}
	where := fmt.Sprintf("update %s %s=%v", row.Table.Sanitize(), row.keyColumn(), row.Key)
	tag, err := db.Exec(ctx, query, args...)
	if err != nil {
		return wrapErr(where, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var current int64
	err = db.QueryRow(ctx, lookup, row.Key).Scan(&current)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("postgres: %s: %w", where, fence.ErrNotFound)
	case err != nil:
		return wrapErr(where+": read fence", err)
	}
	return fmt.Errorf("postgres: %s: %w", where, fence.Stale(fmt.Sprint(row.Key), token, fence.Token(current)))
}

func (r Row) keyColumn() string {
	if r.KeyColumn == "" {
		return "id"
	}
	return r.KeyColumn
}

func (r Row) fenceColumn() string {
	if r.FenceColumn == "" {
		return "fence"
	}
	return r.FenceColumn
}

// updateSQL builds the fenced UPDATE and the fence lookup for r. The
// parameters are the set values in column order, then the token, then the
// key.
func (r Row) updateSQL(set map[string]any) (update, lookup string, args []any, err error) {
	if len(r.Table) == 0 {
		return "", "", nil, fence.Invalid("postgres: update: no table")
	}
	table, err := tableName(r.Table)
	if err != nil {
		return "", "", nil, err
	}
	keyCol, fenceCol := r.keyColumn(), r.fenceColumn()
	for _, c := range []string{keyCol, fenceCol} {
		if err := identPart(c); err != nil {
			return "", "", nil, err
		}
	}
	if r.Key == nil {
		return "", "", nil, fence.Invalid("postgres: update %s: nil key", table)
	}
	cols := make([]string, 0, len(set))
	for c := range set {
		if err := identPart(c); err != nil {
			return "", "", nil, err
		}
		if c == keyCol || c == fenceCol {
			return "", "", nil, fence.Invalid("postgres: update %s: set must not name the key or fence column %q", table, c)
		}
		cols = append(cols, c)
	}
	sort.Strings(cols) // the same statement text for the same columns
	var b strings.Builder
	fmt.Fprintf(&b, "UPDATE %s SET ", table)
	for i, c := range cols {
		fmt.Fprintf(&b, "%s = $%d, ", pgx.Identifier{c}.Sanitize(), i+1)
		args = append(args, set[c])
	}
	tok, key := len(cols)+1, len(cols)+2
	fc, kc := pgx.Identifier{fenceCol}.Sanitize(), pgx.Identifier{keyCol}.Sanitize()
	fmt.Fprintf(&b, "%s = $%d WHERE %s = $%d AND coalesce(%s, 0) <= $%d", fc, tok, kc, key, fc, tok)
	lookup = fmt.Sprintf("SELECT coalesce(%s, 0) FROM %s WHERE %s = $1", fc, table, kc)
	return b.String(), lookup, args, nil
}
