package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Admin runs the operator's calls on a lease table that no application
// needs: listing the held locks, and raising every token after a restore
// (Bump). cmd/fencectl uses it.
type Admin struct {
	db    Pool
	table string // sanitized, for messages
	err   error
	list  string
	max   string
	lock  string
	bump  string
	floor string

	queue   string // the queue table, sanitized
	waiters string

	permitTable string // the permits' state table, sanitized, for messages
	permitErr   error  // why the lease table has no permit tables, if so
	permitNames string
}

// NewAdmin returns an Admin on pool for the lease table named in opts (nil
// for the default fencekit_leases). A malformed table name or a nil pool is
// reported by every method as an error matching fence.ErrInvalid.
func NewAdmin(pool Pool, opts *Options) *Admin {
	_, table, err := opts.tables()
	if err == nil && pool == nil {
		err = fence.Invalid("postgres: nil pool")
	}
	var queue string
	if err == nil {
		_, lo := opts.identifiers()
		queue, err = queueTable(lo)
	}
	if err != nil {
		return &Admin{err: err}
	}
	_, lo := opts.identifiers()
	pt, permitErr := newPermitTables(lo)
	return &Admin{
		db:          pool,
		table:       table,
		queue:       queue,
		permitTable: pt.state,
		permitErr:   permitErr,
		permitNames: fmt.Sprintf(`SELECT name FROM %s WHERE expires_at > clock_timestamp() AND left(name, length($1)) = $1
UNION
SELECT name FROM %s WHERE expires_at > clock_timestamp() AND left(name, length($1)) = $1
ORDER BY name`, pt.holders, pt.places),
		// One row per name, in the order given (WITH ORDINALITY).
		waiters: fmt.Sprintf(`SELECT (SELECT count(*) FROM %s w WHERE w.name = n.name AND w.expires_at > clock_timestamp())
FROM unnest($1::text[]) WITH ORDINALITY AS n(name, i)
ORDER BY n.i`, queue),
		// left() compares the prefix as text, so '%' and '_' in it are
		// plain characters (LIKE would treat them as wildcards).
		list: fmt.Sprintf(`SELECT name, owner, token, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, coalesce(metadata, '')
FROM %s
WHERE name <> '' AND owner IS NOT NULL AND expires_at > clock_timestamp()
  AND left(name, length($1)) = $1
ORDER BY name`, table),
		max:  fmt.Sprintf(`SELECT coalesce(max(token), 0) FROM %s`, table),
		lock: fmt.Sprintf(`LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE`, table),
		bump: fmt.Sprintf(`UPDATE %s SET token = token + $1`, table),
		// A table without a floor row gets one at $1, so that a lock whose
		// row is gone (swept after the backup was taken) starts above it.
		floor: fmt.Sprintf(`INSERT INTO %s (name, token) VALUES ('', $1) ON CONFLICT (name) DO NOTHING`, table),
	}
}

// List returns the locks held now (by the database clock) whose names start
// with prefix ("" for all), sorted by name, each with its holder: owner,
// token, remaining TTL and metadata. It leaves Waiting 0: Waiters counts
// the places in line.
func (a *Admin) List(ctx context.Context, prefix string) ([]lock.Info, error) {
	if a.err != nil {
		return nil, a.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, a.list, prefix)
	if err != nil {
		return nil, wrapTableErr(a.table, fixMigrate, "list", err)
	}
	infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lock.Info, error) {
		var (
			info   lock.Info
			h      lock.Holder
			token  int64
			micros int64
		)
		if err := r.Scan(&info.Name, &h.Owner, &token, &micros, &h.Metadata); err != nil {
			return lock.Info{}, err
		}
		h.Token, h.TTL = fence.Token(token), time.Duration(micros)*time.Microsecond
		info.Holders = []lock.Holder{h}
		return info, nil
	})
	if err != nil {
		return nil, wrapTableErr(a.table, fixMigrate, "list", err)
	}
	return infos, nil
}

// PermitNames returns the permit names (semaphores and read-write locks)
// whose names start with prefix ("" for all) and that have a live permit
// or place in line now (by the database clock), sorted by name. It is
// meant for operators (fencectl): Backend.Inspect with a permit kind gives
// each one's holders.
func (a *Admin) PermitNames(ctx context.Context, prefix string) ([]string, error) {
	if a.err != nil {
		return nil, a.err
	}
	if a.permitErr != nil {
		return nil, a.permitErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, a.permitNames, prefix)
	if err != nil {
		return nil, wrapTableErr(a.permitTable, fixMigrate, "list permit names", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrapTableErr(a.permitTable, fixMigrate, "list permit names", err)
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
// is none. Run it after restoring the database from a backup or to a point
// in time: the tokens minted after that point are gone from the table, and
// without a bump the next holders would get them again, so a fenced store
// would take two holders' writes under one token. by must exceed the number
// of tokens that may have been minted for one lock since the restore point
// (acquisitions per second times the seconds lost, with a wide margin);
// tokens are plentiful (up to 2^63-1), so err on the large side.
//
// The rows are raised in one transaction that holds the table in SHARE ROW
// EXCLUSIVE mode, so Acquire, Extend and Release wait for it. A live
// holder's lease stays its own (its owner is kept); its next renewal works
// and the next holder gets a token above the raised one. by must be
// positive, and no token may pass fence.MaxToken: otherwise the error
// matches fence.ErrInvalid and nothing changes.
func (a *Admin) Bump(ctx context.Context, by int64) (BumpResult, error) {
	if by <= 0 {
		return BumpResult{}, fence.Invalid("postgres: bump: %d is not positive", by)
	}
	if a.err != nil {
		return BumpResult{}, a.err
	}
	if err := ctx.Err(); err != nil {
		return BumpResult{}, err
	}
	conn, err := a.db.Acquire(ctx)
	if err != nil {
		return BumpResult{}, wrapErr("bump", err)
	}
	defer conn.Release()
	var res BumpResult
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, a.lock); err != nil {
			return err
		}
		var top int64
		if err := tx.QueryRow(ctx, a.max).Scan(&top); err != nil {
			return err
		}
		if top > int64(fence.MaxToken)-by {
			return fence.Invalid("postgres: bump by %d: the highest token, %d, would pass %d", by, top, fence.MaxToken)
		}
		tag, err := tx.Exec(ctx, a.bump, by)
		if err != nil {
			return err
		}
		res.Rows = tag.RowsAffected()
		if tag, err = tx.Exec(ctx, a.floor, by); err != nil {
			return err
		}
		res.Rows += tag.RowsAffected()
		res.MaxToken = fence.Token(max(top+by, by))
		return nil
	})
	if err != nil {
		if errors.Is(err, fence.ErrInvalid) {
			return BumpResult{}, err
		}
		return BumpResult{}, wrapTableErr(a.table, fixMigrate, "bump", err)
	}
	return res, nil
}
