package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Row names one row of the caller's own table that carries a fence column:
// the version-column recipe, for UpdateFenced.
//
// The fence column is a bigint holding the highest token that has written
// the row; NULL counts as 0, so existing rows can take the column without a
// backfill: ALTER TABLE accounts ADD COLUMN fence bigint.
type Row struct {
	// Table is the table, optionally schema-qualified.
	Table pgx.Identifier
	// Key identifies the row: the columns of its primary key or of a
	// unique constraint, one or several (a composite key), with their
	// values. A Key that matches several rows is refused.
	Key Match
	// Where is an optional condition on the row (status = 'pending'): the
	// update applies only when it holds. See Match.
	Where Match
	// FenceColumn is the fence column; default "fence".
	FenceColumn string
}

// Match is a condition on a row: every column equals its value (column =
// $n), or IS NULL for an untyped nil value. Column names are quoted as
// identifiers and values are always bound parameters, so nothing in a Match
// can change the statement.
type Match map[string]any

// ErrNoMatch matches the error of UpdateFenced when the row exists and the
// token may write it, but the row does not meet Row.Where (someone else
// already did the work, say). Nothing was changed.
var ErrNoMatch = errors.New("postgres: the row does not meet the update's Where condition")

// UpdateFenced sets the columns in set on one row, and its fence column to
// token, in one statement that applies only if the row's fence is at most
// token and the row meets row.Where:
//
//	UPDATE t SET col = $1, ..., fence = $t
//	WHERE id = $k AND coalesce(fence, 0) <= $t AND status = $w
//	  AND (SELECT count(*) FROM (SELECT 1 FROM t WHERE id = $k LIMIT 2) AS n) = 1
//
// Column and table names are quoted as identifiers; every value is a
// parameter. When nothing was updated it tells why: the row's fence is
// above token (an error matching fence.ErrStale; errors.As gives the
// *fence.StaleError, whose Key is the row's key as col=value pairs), the row
// does not exist (fence.ErrNotFound), it does not meet row.Where
// (ErrNoMatch), or row.Key matches several rows (fence.ErrInvalid; nothing
// is updated then, so a key that is not unique never applies partially).
// When a concurrent insert or update made the row writable between the
// update and that diagnosis, the update is simply tried again.
//
// A stale refusal is also reported to the Observer of the lease that ctx
// carries (see Guard.Check), to its lock.Observer.Stale with the Key above.
//
// An empty set only raises the fence: the barrier that a read-modify-write
// needs before its read (see docs/postgres.md). Run it on a pgx.Tx to fence
// several rows in one transaction; the rows stay locked until it ends.
func UpdateFenced(ctx context.Context, db DB, row Row, token fence.Token, set map[string]any) error {
	if db == nil {
		return fence.Invalid("postgres: update: nil DB")
	}
	if !token.Valid() {
		return fence.Invalid("token %d is outside 1..%d", token, fence.MaxToken)
	}
	st, err := row.statements(token, set)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	where := fmt.Sprintf("update %s %s", st.table, st.key)
	for attempt := 1; ; attempt++ {
		tag, err := db.Exec(ctx, st.update, st.updateArgs...)
		if err != nil {
			return wrapTableErr(st.table, fixOwnRow, where, err)
		}
		switch n := tag.RowsAffected(); {
		case n == 1:
			return nil
		case n > 1:
			// Only a concurrent insert of a duplicate key can get past the
			// statement's own count of matching rows.
			return fence.Invalid("postgres: %s: the key matched %d rows, which were all updated; Row.Key must be unique", where, n)
		}
		var (
			matched    int
			current    int64
			meetsWhere bool
			lookupErr  error
		)
		rows, err := db.Query(ctx, st.lookup, st.lookupArgs...)
		if err == nil {
			for rows.Next() {
				matched++
				lookupErr = rows.Scan(&current, &meetsWhere)
			}
			rows.Close()
			err = rows.Err()
		}
		if err == nil {
			err = lookupErr
		}
		switch {
		case err != nil:
			return wrapTableErr(st.table, fixOwnRow, where+": read fence", err)
		case matched == 0:
			return fmt.Errorf("postgres: %s: %w", where, fence.ErrNotFound)
		case matched > 1:
			return fence.Invalid("postgres: %s: the key matches several rows; Row.Key must be unique (nothing was updated)", where)
		case fence.Token(current) > token:
			return lock.ReportStale(ctx, st.key, fmt.Errorf("postgres: %s: %w", where, fence.Stale(st.key, token, fence.Token(current))))
		case !meetsWhere:
			return fmt.Errorf("%w: %s", ErrNoMatch, where)
		case attempt >= 3:
			return fmt.Errorf("postgres: %s: token %d refused, but the row's fence is now %d and it meets the condition; is something else changing the table?", where, token, current)
		}
		// The row appeared or changed between the update and the lookup
		// (a concurrent insert, say): try again.
	}
}

// fencedUpdate holds the statements of one UpdateFenced call.
type fencedUpdate struct {
	table, key             string // for messages: the sanitized table, "col=value, ..."
	update, lookup         string
	updateArgs, lookupArgs []any
}

// params numbers bound parameters.
type params struct{ args []any }

func (p *params) add(v any) string {
	p.args = append(p.args, v)
	return fmt.Sprintf("$%d", len(p.args))
}

// condition renders m as "a" = $1 AND "b" IS NULL, binding its values.
func (p *params) condition(m Match, cols []string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		if m[c] == nil {
			parts[i] = pgx.Identifier{c}.Sanitize() + " IS NULL"
		} else {
			parts[i] = pgx.Identifier{c}.Sanitize() + " = " + p.add(m[c])
		}
	}
	return strings.Join(parts, " AND ")
}

// columns returns m's column names, sorted (the same statement text for the
// same columns), after checking each as an identifier.
func columns(m Match) ([]string, error) {
	cols := make([]string, 0, len(m))
	for c := range m {
		if err := identPart(c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	sort.Strings(cols)
	return cols, nil
}

// statements checks r and set and builds the update and the lookup.
func (r Row) statements(token fence.Token, set map[string]any) (*fencedUpdate, error) {
	if len(r.Table) == 0 {
		return nil, fence.Invalid("postgres: update: no table")
	}
	table, err := tableName(r.Table)
	if err != nil {
		return nil, err
	}
	fenceCol := r.FenceColumn
	if fenceCol == "" {
		fenceCol = "fence"
	}
	if err := identPart(fenceCol); err != nil {
		return nil, err
	}
	if len(r.Key) == 0 {
		return nil, fence.Invalid("postgres: update %s: no key", table)
	}
	keyCols, err := columns(r.Key)
	if err != nil {
		return nil, err
	}
	whereCols, err := columns(r.Where)
	if err != nil {
		return nil, err
	}
	setCols, err := columns(set)
	if err != nil {
		return nil, err
	}
	keyDesc := make([]string, len(keyCols))
	for i, c := range keyCols {
		if r.Key[c] == nil {
			return nil, fence.Invalid("postgres: update %s: nil value for key column %q", table, c)
		}
		if c == fenceCol {
			return nil, fence.Invalid("postgres: update %s: the fence column %q cannot be a key", table, c)
		}
		keyDesc[i] = fmt.Sprintf("%s=%v", c, r.Key[c])
	}
	if _, ok := r.Where[fenceCol]; ok {
		return nil, fence.Invalid("postgres: update %s: Where must not name the fence column %q", table, fenceCol)
	}
	for _, c := range setCols {
		if _, ok := r.Key[c]; ok || c == fenceCol {
			return nil, fence.Invalid("postgres: update %s: set must not name the key or fence column %q", table, c)
		}
	}
	fc := pgx.Identifier{fenceCol}.Sanitize()
	whereOrTrue := func(p *params) string {
		if len(whereCols) == 0 {
			return "true"
		}
		return p.condition(r.Where, whereCols)
	}

	var up params
	var b strings.Builder
	fmt.Fprintf(&b, "UPDATE %s SET ", table)
	for _, c := range setCols {
		fmt.Fprintf(&b, "%s = %s, ", pgx.Identifier{c}.Sanitize(), up.add(set[c]))
	}
	tok := up.add(int64(token))
	key := up.condition(r.Key, keyCols)
	fmt.Fprintf(&b, "%s = %s WHERE %s AND coalesce(%s, 0) <= %s AND %s", fc, tok, key, fc, tok, whereOrTrue(&up))
	// Refuse, atomically, a key that matches several rows.
	fmt.Fprintf(&b, " AND (SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s LIMIT 2) AS n) = 1", table, key)

	var look params
	lookKey := look.condition(r.Key, keyCols)
	lookup := fmt.Sprintf("SELECT coalesce(%s, 0), (%s) IS TRUE FROM %s WHERE %s LIMIT 2", fc, whereOrTrue(&look), table, lookKey)
	return &fencedUpdate{
		table: table, key: strings.Join(keyDesc, ", "),
		update: b.String(), updateArgs: up.args,
		lookup: lookup, lookupArgs: look.args,
	}, nil
}
