package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Row names one row of the caller's own table that carries a fence column:
// the version-column recipe, for UpdateFenced.
//
// The fence column is a BIGINT holding the highest token that has written
// the row; NULL counts as 0, so existing rows can take the column without a
// backfill: ALTER TABLE accounts ADD COLUMN fence BIGINT NULL.
type Row struct {
	// Table is the table, optionally qualified with its database or
	// schema.
	Table Identifier
	// Key identifies the row: the columns of its primary key or of a
	// unique key, one or several, with their values. A Key that matches
	// several rows is refused. The columns compare as the table defines
	// them: a case-insensitive collation on a key column makes "A" and "a"
	// one row.
	Key Match
	// Where is an optional condition on the row (status = 'pending'): the
	// update applies only when it holds. See Match.
	Where Match
	// FenceColumn is the fence column; default "fence".
	FenceColumn string
}

// Match is a condition on a row: every column equals its value (column =
// ?), or IS NULL for an untyped nil value. Column names are quoted as
// identifiers and values are always bound parameters, so nothing in a Match
// can change the statement.
type Match map[string]any

// ErrNoMatch matches the error of UpdateFenced when the row exists and the
// token may write it, but the row does not meet Row.Where (someone else
// already did the work, say). Nothing was changed.
var ErrNoMatch = errors.New("sqldb: the row does not meet the update's Where condition")

// UpdateFenced sets the columns in set on one row inside tx, and its fence
// column to token, only if the row's fence is at most token and the row
// meets row.Where. On PostgreSQL that is one statement:
//
//	UPDATE t SET col = $1, ..., fence = $2
//	WHERE id = $3 AND coalesce(fence, 0) <= $2 AND status = $4
//	  AND (SELECT count(*) FROM (SELECT 1 FROM t WHERE id = $3 LIMIT 2) AS n) = 1
//
// On MySQL it is two: a locking read that takes the row's exclusive lock
// first, then the UPDATE of the row it locked:
//
//	SELECT COALESCE(fence, 0), (status = ?) IS TRUE FROM t WHERE id = ? LIMIT 2 FOR UPDATE
//	UPDATE t SET col = ?, ..., fence = ? WHERE id = ?
//
// so that transactions queued on one row never hold a shared lock that
// they then try to upgrade: under InnoDB's default REPEATABLE READ a
// subquery in the UPDATE would take one, and two queued waiters deadlock
// upgrading it when the holder commits. One fenced row never deadlocks
// with itself (TestQueuedBarriersNoDeadlock,
// TestVersionColumnRecipeContention). No LAST_INSERT_ID is used, so the
// caller's LAST_INSERT_ID() is kept (TestUpdateFencedKeepsLastInsertID).
//
// Column and table names are quoted as identifiers; every value is a
// parameter. When nothing was updated it tells why: the row's fence is
// above token (an error matching fence.ErrStale; errors.As gives the
// *fence.StaleError, whose Key is the row's key as col=value pairs), the row
// does not exist (fence.ErrNotFound), it does not meet row.Where
// (ErrNoMatch), or row.Key matches several rows (fence.ErrInvalid; nothing
// is updated then). A deadlock or lock wait timeout is a *ConflictError
// (ErrConflict): roll tx back.
//
// An empty set only raises the fence: the barrier that a read-modify-write
// needs before its read (see docs/sqldb.md). The row stays locked until tx
// ends.
func UpdateFenced(ctx context.Context, tx *sql.Tx, d Dialect, row Row, token fence.Token, set map[string]any) error {
	if tx == nil {
		return fence.Invalid("sqldb: update: nil transaction")
	}
	if err := d.valid(); err != nil {
		return err
	}
	if !token.Valid() {
		return fence.Invalid("token %d is outside 1..%d", token, fence.MaxToken)
	}
	st, err := row.statements(d, token, set)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	where := fmt.Sprintf("update %s %s", st.table, st.key)
	if d == MySQL {
		return updateLockedFirst(ctx, tx, st, token, where)
	}
	for attempt := 1; ; attempt++ {
		res, err := tx.ExecContext(ctx, st.update, st.updateArgs...)
		if err != nil {
			return classify(ctx, d, st.table, fixOwnRow, where, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return classify(ctx, d, st.table, fixOwnRow, where, err)
		}
		if n > 0 {
			return nil
		}
		current, err := st.diagnose(ctx, tx, d, token, where)
		if err != nil {
			return err
		}
		if attempt >= 3 {
			return fmt.Errorf("sqldb: %s: token %d refused, but the row's fence is now %d and it meets the condition; is something else changing the table?", where, token, current)
		}
		// The row appeared or changed between the update and the lookup:
		// try again.
	}
}

// updateLockedFirst is UpdateFenced on MySQL: lock and read the row, then
// update it under that lock.
func updateLockedFirst(ctx context.Context, tx *sql.Tx, st *fencedUpdate, token fence.Token, where string) error {
	current, err := st.diagnose(ctx, tx, MySQL, token, where)
	if err != nil {
		return err
	}
	if st.setsNothing && fence.Token(current) == token {
		return nil // the fence is token already, and the row is locked
	}
	if _, err := tx.ExecContext(ctx, st.update, st.updateArgs...); err != nil {
		return classify(ctx, MySQL, st.table, fixOwnRow, where, err)
	}
	return nil
}

// diagnose reads the row with its lookup (a locking read on MySQL) and
// returns its fence, or the error that says why token may not update it.
func (st *fencedUpdate) diagnose(ctx context.Context, tx *sql.Tx, d Dialect, token fence.Token, where string) (int64, error) {
	var (
		matched    int
		current    int64
		meetsWhere bool
		lookupErr  error
	)
	rows, err := tx.QueryContext(ctx, st.lookup, st.lookupArgs...)
	if err == nil {
		for rows.Next() {
			matched++
			lookupErr = rows.Scan(&current, &meetsWhere)
		}
		_ = rows.Close()
		err = rows.Err()
	}
	if err == nil {
		err = lookupErr
	}
	switch {
	case err != nil:
		return 0, classify(ctx, d, st.table, fixOwnRow, where+": read fence", err)
	case matched == 0:
		return 0, fmt.Errorf("sqldb: %s: %w", where, fence.ErrNotFound)
	case matched > 1:
		return 0, fence.Invalid("sqldb: %s: the key matches several rows; Row.Key must be unique (nothing was updated)", where)
	case fence.Token(current) > token:
		return 0, lock.ReportStale(ctx, st.key, fmt.Errorf("sqldb: %s: %w", where, fence.Stale(st.key, token, fence.Token(current))))
	case !meetsWhere:
		return 0, fmt.Errorf("%w: %s", ErrNoMatch, where)
	}
	return current, nil
}

// fencedUpdate holds the statements of one UpdateFenced call.
type fencedUpdate struct {
	table, key             string // for messages: the quoted table, "col=value, ..."
	setsNothing            bool   // a barrier: only the fence is raised
	update, lookup         string
	updateArgs, lookupArgs []any
}

// condition renders m as a = ? AND b IS NULL, binding its values.
func (p *params) condition(m Match, cols []string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		q, _ := p.d.quotePart(c) // checked by columns
		if m[c] == nil {
			parts[i] = q + " IS NULL"
		} else {
			parts[i] = q + " = " + p.add(m[c])
		}
	}
	return strings.Join(parts, " AND ")
}

// columns returns m's column names, sorted (the same statement text for the
// same columns), after checking each as an identifier.
func columns(d Dialect, m Match) ([]string, error) {
	cols := make([]string, 0, len(m))
	for c := range m {
		if _, err := d.quotePart(c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	sort.Strings(cols)
	return cols, nil
}

// statements checks r and set and builds the update and the lookup.
func (r Row) statements(d Dialect, token fence.Token, set map[string]any) (*fencedUpdate, error) {
	if len(r.Table) == 0 {
		return nil, fence.Invalid("sqldb: update: no table")
	}
	table, err := d.quote(r.Table)
	if err != nil {
		return nil, err
	}
	fenceCol := r.FenceColumn
	if fenceCol == "" {
		fenceCol = "fence"
	}
	fc, err := d.quotePart(fenceCol)
	if err != nil {
		return nil, err
	}
	if len(r.Key) == 0 {
		return nil, fence.Invalid("sqldb: update %s: no key", table)
	}
	keyCols, err := columns(d, r.Key)
	if err != nil {
		return nil, err
	}
	whereCols, err := columns(d, r.Where)
	if err != nil {
		return nil, err
	}
	setCols, err := columns(d, set)
	if err != nil {
		return nil, err
	}
	keyDesc := make([]string, len(keyCols))
	for i, c := range keyCols {
		if r.Key[c] == nil {
			return nil, fence.Invalid("sqldb: update %s: nil value for key column %q", table, c)
		}
		if c == fenceCol {
			return nil, fence.Invalid("sqldb: update %s: the fence column %q cannot be a key", table, c)
		}
		keyDesc[i] = fmt.Sprintf("%s=%v", c, r.Key[c])
	}
	if _, ok := r.Where[fenceCol]; ok {
		return nil, fence.Invalid("sqldb: update %s: Where must not name the fence column %q", table, fenceCol)
	}
	for _, c := range setCols {
		if _, ok := r.Key[c]; ok || c == fenceCol {
			return nil, fence.Invalid("sqldb: update %s: set must not name the key or fence column %q", table, c)
		}
	}
	whereOrTrue := func(p *params) string {
		if len(whereCols) == 0 {
			return "TRUE"
		}
		return p.condition(r.Where, whereCols)
	}

	up := params{d: d}
	var b strings.Builder
	fmt.Fprintf(&b, "UPDATE %s SET ", table)
	for _, c := range setCols {
		q, _ := d.quotePart(c)
		fmt.Fprintf(&b, "%s = %s, ", q, up.add(set[c]))
	}
	t := int64(token)
	if d == MySQL {
		// The row is locked and checked by the lookup first (see
		// UpdateFenced): the update names it by its key alone.
		fmt.Fprintf(&b, "%s = %s WHERE %s", fc, up.add(t), up.condition(r.Key, keyCols))
	} else {
		tok := up.add(t)
		key := up.condition(r.Key, keyCols)
		fmt.Fprintf(&b, "%s = %s WHERE %s AND coalesce(%s, 0) <= %s AND %s", fc, tok, key, fc, tok, whereOrTrue(&up))
		fmt.Fprintf(&b, " AND (SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s LIMIT 2) AS n) = 1", table, key)
	}

	look := params{d: d}
	lookWhere := whereOrTrue(&look)
	lookKey := look.condition(r.Key, keyCols)
	lookup := fmt.Sprintf("SELECT COALESCE(%s, 0), (%s) IS TRUE FROM %s WHERE %s LIMIT 2", fc, lookWhere, table, lookKey)
	if d == MySQL {
		lookup += " FOR UPDATE"
	}
	return &fencedUpdate{
		table: table, key: strings.Join(keyDesc, ", "), setsNothing: len(set) == 0,
		update: b.String(), updateArgs: up.args,
		lookup: lookup, lookupArgs: look.args,
	}, nil
}
