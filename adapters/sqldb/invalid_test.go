package sqldb_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// counting is a database/sql connector whose connections count every
// statement and fail it.
type counting struct{ n *atomic.Int64 }

func (c counting) Connect(context.Context) (driver.Conn, error) { return countingConn(c), nil }
func (c counting) Driver() driver.Driver                        { return nil }

type countingConn counting

func (c countingConn) Prepare(string) (driver.Stmt, error) {
	c.n.Add(1)
	return nil, errors.New("counting: nothing may be sent")
}
func (c countingConn) Close() error              { return nil }
func (c countingConn) Begin() (driver.Tx, error) { return countingTx{}, nil }

type countingTx struct{}

func (countingTx) Commit() error   { return nil }
func (countingTx) Rollback() error { return nil }

// failing is a connector whose statements fail with err; n counts them.
type failing struct {
	err error
	n   *atomic.Int64
}

func (f failing) Connect(context.Context) (driver.Conn, error) { return failingConn(f), nil }
func (f failing) Driver() driver.Driver                        { return nil }

type failingConn failing

func (f failingConn) Prepare(string) (driver.Stmt, error) {
	f.n.Add(1)
	return nil, f.err
}
func (f failingConn) Close() error              { return nil }
func (f failingConn) Begin() (driver.Tx, error) { return countingTx{}, nil }

// TestBadInputNothingSent: bad arguments, names and dialects get an error
// matching fence.ErrInvalid before any statement reaches the driver. A
// Backend's requests go through a lock.Client, which checks them; the
// Backend checks what is its own (a table name, a nil db).
func TestBadInputNothingSent(t *testing.T) {
	ctx := context.Background()
	var n atomic.Int64
	db := sql.OpenDB(counting{&n})
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	long := strings.Repeat("x", fence.MaxKeyLen+1)
	badTable := &sqldb.Options{StoreTable: sqldb.Identifier{"a", "b", "c"}}
	tooLong := &sqldb.Options{StoreTable: sqldb.Identifier{strings.Repeat("t", 65)}}
	trailing := &sqldb.Options{LeaseTable: sqldb.Identifier{"t "}}
	same := &sqldb.Options{StoreTable: sqldb.Identifier{"t"}, LeaseTable: sqldb.Identifier{"t"}}
	owner := "owner"
	row := sqldb.Row{Table: sqldb.Identifier{"t"}, Key: sqldb.Match{"id": 1}}
	client := lock.New(sqldb.NewBackend(db, sqldb.MySQL, nil), nil)
	for i, err := range []error{
		sqldb.NewStore(db, sqldb.MySQL, nil).Put(ctx, "", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, nil).Put(ctx, long, 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, nil).Put(ctx, "k\x00", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, nil).Put(ctx, "k", 0, nil),
		sqldb.NewStore(db, sqldb.MySQL, nil).Delete(ctx, "k", -1),
		sqldb.NewStore(db, sqldb.PostgreSQL, nil).Advance(ctx, "\xff", 1),
		sqldb.NewStore(db, 0, nil).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.Dialect(9), nil).Put(ctx, "k", 1, nil),
		sqldb.NewStore(nil, sqldb.MySQL, nil).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, badTable).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, tooLong).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, same).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, &sqldb.Options{StoreTable: sqldb.Identifier{"t\U0001F600"}}).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.PostgreSQL, &sqldb.Options{StoreTable: sqldb.Identifier{strings.Repeat("t", 64)}}).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.PostgreSQL, &sqldb.Options{StoreTable: sqldb.Identifier{"s", "t\x00"}}).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, &sqldb.Options{StoreTable: sqldb.Identifier{"\xff"}}).Put(ctx, "k", 1, nil),
		sqldb.NewStore(db, sqldb.MySQL, &sqldb.Options{StoreTable: sqldb.Identifier{""}}).Put(ctx, "k", 1, nil),
		direct{sqldb.NewBackend(db, sqldb.MySQL, trailing)}.Release(ctx, "n", owner),
		sqldb.NewGuard(sqldb.MySQL, nil).Check(ctx, nil, "r", 1),
		sqldb.NewGuard(sqldb.MySQL, nil).Check(ctx, tx, "r", 0),
		sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 0, nil),
		sqldb.UpdateFenced(ctx, nil, sqldb.MySQL, row, 1, nil),
		sqldb.UpdateFenced(ctx, tx, 0, row, 1, nil),
		sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, sqldb.Row{Table: sqldb.Identifier{"t"}}, 1, nil),
		sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, sqldb.Row{Table: sqldb.Identifier{"t"}, Key: sqldb.Match{"id": nil}}, 1, nil),
		sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 1, map[string]any{"id": 2}),
		sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 1, map[string]any{"fence": 2}),
		sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, sqldb.Row{Table: sqldb.Identifier{"t"}, Key: sqldb.Match{"a\x00": 1}}, 1, nil),
		sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, sqldb.Row{Table: sqldb.Identifier{"t"}, Key: sqldb.Match{"id": 1}, Where: sqldb.Match{"fence": 1}}, 1, nil),
		sqldb.Migrate(ctx, db, 0, nil),
		sqldb.Migrate(ctx, nil, sqldb.MySQL, nil),
		sqldb.Migrate(ctx, db, sqldb.MySQL, same),
		func() error {
			_, err := client.TryAcquire(ctx, "n", time.Microsecond)
			return err
		}(),
		func() error {
			_, err := client.TryAcquire(ctx, "", time.Second)
			return err
		}(),
		func() error {
			_, err := lock.New(sqldb.NewBackend(nil, sqldb.MySQL, nil), nil).TryAcquire(ctx, "n", time.Second)
			return err
		}(),
		func() error {
			_, err := client.TryAcquire(lock.ContextWithMetadata(ctx, "a\x00"), "n", time.Second)
			return err
		}(),
		func() error {
			_, err := lock.New(sqldb.NewBackend(db, sqldb.PostgreSQL, nil), nil).Resume(ctx, "n", "", time.Second)
			return err
		}(),
		func() error { _, err := sqldb.NewStore(db, sqldb.MySQL, nil).Get(ctx, ""); return err }(),
		func() error { _, err := client.Inspect(ctx, long); return err }(),
	} {
		require.ErrorIs(t, err, fence.ErrInvalid, "case %d", i)
	}
	require.Equal(t, int64(0), n.Load())
}
