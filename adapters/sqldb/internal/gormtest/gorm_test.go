package gormtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	gmysql "gorm.io/driver/mysql"
	gpostgres "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// Account is the application's own table of the recipe.
type Account struct {
	ID      string `gorm:"primaryKey;size:32"`
	Balance int64
	Fence   *int64
}

// opener opens a GORM database on a fresh database or schema of t's own.
type opener struct {
	name string
	d    sqldb.Dialect
	open func(t *testing.T, cfg *gorm.Config) (*gorm.DB, *sql.DB)
}

func openers() []opener {
	return []opener{
		{"mysql", sqldb.MySQL, func(t *testing.T, cfg *gorm.Config) (*gorm.DB, *sql.DB) {
			db := testkit.OpenMySQL(t, testkit.MySQLConfig(t))
			g, err := gorm.Open(gmysql.New(gmysql.Config{Conn: db}), cfg)
			require.NoError(t, err)
			return g, db
		}},
		{"postgres", sqldb.PostgreSQL, func(t *testing.T, cfg *gorm.Config) (*gorm.DB, *sql.DB) {
			// Connections on a schema of t's own.
			db := stdlib.OpenDBFromPool(testkit.Postgres(t))
			t.Cleanup(func() { _ = db.Close() })
			g, err := gorm.Open(gpostgres.New(gpostgres.Config{Conn: db}), cfg)
			require.NoError(t, err)
			return g, db
		}},
	}
}

// transfer is the docs' GORM recipe: inside db.Transaction, fence the
// transaction with Guard.Check on the *sql.Tx that sqldb.TxOf finds in
// the transaction's connection pool, then read and write through GORM;
// and the version-column recipe on the same transaction.
func transfer(ctx context.Context, gdb *gorm.DB, d sqldb.Dialect, guard *sqldb.Guard, token fence.Token, amount int64) error {
	return gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		sqlTx, err := sqldb.TxOf(tx.Statement.ConnPool)
		if err != nil {
			return err
		}
		if err := guard.Check(ctx, sqlTx, "accounts", token); err != nil {
			return err // GORM rolls back
		}
		row := sqldb.Row{Table: sqldb.Identifier{"accounts"}, Key: sqldb.Match{"id": "bob"}}
		if err := sqldb.UpdateFenced(ctx, sqlTx, d, row, token, nil); err != nil {
			return err
		}
		var acct Account
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).First(&acct, "id = ?", "alice").Error; err != nil {
			return err
		}
		return tx.Model(&acct).Update("balance", acct.Balance-amount).Error
	})
}

// TestGormRecipe runs the GORM recipe of docs/sqldb.md with real GORM, with
// PrepareStmt false and true, on MariaDB and PostgreSQL: the current
// holder's transfer commits, a stale holder's is refused with
// fence.ErrStale and rolled back; and outside a transaction TxOf refuses
// GORM's pool (a *sql.DB, or a *gorm.PreparedStmtDB) with
// fence.ErrInvalid.
func TestGormRecipe(t *testing.T) {
	for _, o := range openers() {
		for _, prepare := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/PrepareStmt=%v", o.name, prepare), func(t *testing.T) {
				ctx := testkit.Context(t)
				gdb, db := o.open(t, &gorm.Config{PrepareStmt: prepare, Logger: logger.Discard})
				require.NoError(t, sqldb.Migrate(ctx, db, o.d, nil))
				require.NoError(t, gdb.AutoMigrate(&Account{}))
				require.NoError(t, gdb.Create(&[]Account{{ID: "alice", Balance: 100}, {ID: "bob"}}).Error)
				guard := sqldb.NewGuard(o.d, nil)

				require.NoError(t, transfer(ctx, gdb, o.d, guard, 5, 10))
				err := transfer(ctx, gdb, o.d, guard, 4, 10)
				require.True(t, errors.Is(err, fence.ErrStale), "stale transfer: %v", err)
				var acct Account
				require.NoError(t, gdb.First(&acct, "id = ?", "alice").Error)
				require.Equal(t, int64(90), acct.Balance, "only the current holder's transfer applied")

				_, err = sqldb.TxOf(gdb.Statement.ConnPool)
				require.True(t, errors.Is(err, fence.ErrInvalid), "GORM's pool outside a transaction: %v", err)
			})
		}
	}
}
