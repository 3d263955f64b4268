package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Admin runs the operator's calls on a lease table that no application
// needs: listing the held locks, and raising every token after a restore
// (Bump). cmd/fencectl uses it. On PostgreSQL it does what
// postgres.Admin does, on the same table layout.
type Admin struct {
	d     Dialect
	db    *sql.DB
	table string // quoted
	queue string // the queue table, quoted
	opts  *Options
	err   error
}

// NewAdmin returns an Admin on db in dialect d for the lease table named in
// opts (nil for the default fencekit_leases). An unknown dialect, a
// malformed table name or a nil db is reported by every method as an error
// matching fence.ErrInvalid.
func NewAdmin(db *sql.DB, d Dialect, opts *Options) *Admin {
	_, table, err := opts.tables(d)
	if err == nil && db == nil {
		err = fence.Invalid("sqldb: nil *sql.DB")
	}
	var queue string
	if err == nil {
		queue, err = opts.queueTable(d)
	}
	if err != nil {
		return &Admin{err: err}
	}
	if opts != nil {
		c := *opts // later changes to the caller's Options change nothing here
		opts = &c
	}
	return &Admin{d: d, db: db, table: table, queue: queue, opts: opts}
}

// listSQL returns the statement of List: the live rows whose names start
// with the parameter, compared byte by byte (no LIKE, so '%' and '_' are
// plain characters), sorted by name, with the remaining TTL in
// microseconds by the database clock.
func (a *Admin) listSQL() string {
	if a.d == MySQL {
		return fmt.Sprintf("SELECT `name`, `owner`, `token`, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), `expires_at`), COALESCE(`metadata`, '')\n"+
			"FROM %s\n"+
			"WHERE `name` <> '' AND `owner` IS NOT NULL AND `expires_at` > UTC_TIMESTAMP(6)\n"+
			"  AND LEFT(`name`, LENGTH(CAST(? AS BINARY))) = CAST(? AS BINARY)\n"+
			"ORDER BY `name`", a.table)
	}
	return fmt.Sprintf(`SELECT name, owner, token, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, coalesce(metadata, '')
FROM %s
WHERE name <> '' AND owner IS NOT NULL AND expires_at > clock_timestamp()
  AND left(name, length($1::text)) = $2::text
ORDER BY name`, a.table)
}

// List returns the locks held now (by the database clock) whose names start
// with prefix ("" for all), sorted by name (byte order), each with its one
// holder: owner, token, remaining TTL and metadata. It reads the lease
// table alone: Waiting is 0 (see Waiters).
func (a *Admin) List(ctx context.Context, prefix string) ([]lock.Info, error) {
	if a.err != nil {
		return nil, a.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := a.db.QueryContext(ctx, a.listSQL(), prefix, prefix)
	if err != nil {
		return nil, classify(ctx, a.d, a.table, fixMigrate, "list", err)
	}
	defer rows.Close()
	var infos []lock.Info
	for rows.Next() {
		var (
			name   string
			h      lock.Holder
			token  int64
			micros sql.NullInt64
		)
		if err := rows.Scan(&name, &h.Owner, &token, &micros, &h.Metadata); err != nil {
			return nil, classify(ctx, a.d, a.table, fixMigrate, "list", err)
		}
		if !micros.Valid || micros.Int64 <= 0 {
			continue // expired between the row's filter and its TTL
		}
		h.Token, h.TTL = fence.Token(token), time.Duration(micros.Int64)*time.Microsecond
		infos = append(infos, lock.Info{Name: name, Holders: []lock.Holder{h}})
	}
	if err := rows.Err(); err != nil {
		return nil, classify(ctx, a.d, a.table, fixMigrate, "list", err)
	}
	return infos, nil
}

// permitNamesSQL returns the statement of PermitNames on the permit owners
// table owners: the names with a live permit or place, sorted by name.
func (a *Admin) permitNamesSQL(owners string) string {
	if a.d == MySQL {
		return fmt.Sprintf("SELECT DISTINCT `name` FROM %s\n"+
			"WHERE `expires_at` > UTC_TIMESTAMP(6) AND LEFT(`name`, LENGTH(CAST(? AS BINARY))) = CAST(? AS BINARY)\n"+
			"ORDER BY `name`", owners)
	}
	return fmt.Sprintf(`SELECT DISTINCT name FROM %s
WHERE expires_at > clock_timestamp() AND left(name, length($1::text)) = $2::text
ORDER BY name`, owners)
}

// PermitNames returns the permit names (semaphores and read-write locks)
// whose names start with prefix ("" for all) and that have a live permit
// or place in line now (by the database clock), sorted by name (byte
// order). It is meant for operators (fencectl): Backend.Inspect with a
// permit kind gives each one's holders.
func (a *Admin) PermitNames(ctx context.Context, prefix string) ([]string, error) {
	if a.err != nil {
		return nil, a.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, owners, err := a.opts.permitTables(a.d)
	if err != nil {
		return nil, err
	}
	rows, err := a.db.QueryContext(ctx, a.permitNamesSQL(owners), prefix, prefix)
	if err != nil {
		return nil, classify(ctx, a.d, owners, fixMigrate, "list permit names", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, classify(ctx, a.d, owners, fixMigrate, "list permit names", err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(ctx, a.d, owners, fixMigrate, "list permit names", err)
	}
	return names, nil
}

// BumpResult says what Bump did.
type BumpResult struct {
	Rows     int64       // lease rows raised, the floor row included
	MaxToken fence.Token // the highest token in the table afterwards
}

// Bump raises the token of every row of the lease table by by, the floor
// row that Sweep keeps included, and creates the floor row at by when there
// is none, on MySQL as on PostgreSQL. Run it after restoring the database
// from a backup or to a point in time: the tokens minted after that point
// are gone from the table, and without a bump the next holders would get
// them again, so a fenced store would take two holders' writes under one
// token. by must exceed the number of tokens that may have been minted for
// one lock since the restore point (acquisitions per second times the
// seconds lost, with a wide margin); tokens are plentiful (up to 2^63-1),
// so err on the large side. See docs/operations.md, "After a restore".
//
// The rows are raised in one transaction that holds the table locked (see
// Sweep), so the Backend's calls on the lease table wait for it. A live holder's lease
// stays its own; its next renewal works and the next holder gets a token
// above the raised one. by must be positive, and no token may pass
// fence.MaxToken: otherwise the error matches fence.ErrInvalid and nothing
// changes.
func (a *Admin) Bump(ctx context.Context, by int64) (BumpResult, error) {
	if by <= 0 {
		return BumpResult{}, fence.Invalid("sqldb: bump: %d is not positive", by)
	}
	if a.err != nil {
		return BumpResult{}, a.err
	}
	if err := ctx.Err(); err != nil {
		return BumpResult{}, err
	}
	p := &params{d: a.d}
	byParam := p.add(by)
	bump := fmt.Sprintf("UPDATE %s SET %s = %s + %s", a.table, a.col("token"), a.col("token"), byParam)
	var res BumpResult
	err := withTableLock(ctx, a.db, a.d, a.table, func(q querier) error {
		var top, floors int64
		err := q.QueryRowContext(ctx, fmt.Sprintf("SELECT COALESCE(MAX(%[2]s), 0), COUNT(CASE WHEN %[3]s = '' THEN 1 END) FROM %[1]s",
			a.table, a.col("token"), a.col("name"))).Scan(&top, &floors)
		if err != nil {
			return err
		}
		if top > int64(fence.MaxToken)-by {
			return fence.Invalid("sqldb: bump by %d: the highest token, %d, would pass %d", by, top, fence.MaxToken)
		}
		r, err := q.ExecContext(ctx, bump, p.args...)
		if err != nil {
			return err
		}
		// Every row changes (by > 0), so the count is exact whatever
		// the MySQL driver's found-rows setting.
		if res.Rows, err = r.RowsAffected(); err != nil {
			return err
		}
		if floors == 0 {
			// A lock whose row is gone (swept after the backup was
			// taken) starts above the floor.
			fp := &params{d: a.d}
			floor := fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES ('', %s)", a.table, a.col("name"), a.col("token"), fp.add(by))
			if _, err := q.ExecContext(ctx, floor, fp.args...); err != nil {
				return err
			}
			res.Rows++
		}
		res.MaxToken = fence.Token(max(top+by, by))
		return nil
	})
	if err != nil {
		if errors.Is(err, fence.ErrInvalid) {
			return BumpResult{}, err
		}
		return BumpResult{}, classify(ctx, a.d, a.table, fixMigrate, "bump", err)
	}
	return res, nil
}

// col quotes a column name for the dialect.
func (a *Admin) col(name string) string { return quoteColumn(a.d, name) }

// quoteColumn quotes one of fencekit's own column names for d.
func quoteColumn(d Dialect, name string) string {
	q, err := d.quotePart(name)
	if err != nil {
		panic(err) // fencekit's column names are constants
	}
	return q
}
