package postgres

import (
	"context"
	"fmt"
	"strings"
)

// upgradeSQL adds to a lease table created by an earlier version the
// columns that this version uses: metadata (holder metadata, see
// lock.Options.Metadata).
func upgradeSQL(leases string) string {
	return fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS metadata text;\n", leases)
}

// skipCurrentUpgrades drops upgradeSQL from sql when the lease table already
// has its columns. ALTER TABLE takes an ACCESS EXCLUSIVE lock even when IF
// NOT EXISTS finds the column: run at every start, it would wait behind any
// open transaction that read the lease table, and every lease operation
// would queue behind it. The table name is a parameter.
func skipCurrentUpgrades(ctx context.Context, db DB, opts *Options, sql string) (string, error) {
	_, leases, err := opts.tables()
	if err != nil {
		return "", err
	}
	var current bool
	err = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = 'metadata' AND NOT attisdropped)`, leases).Scan(&current)
	if err != nil {
		return "", wrapErr("migrate: read the lease table's columns", err)
	}
	if current {
		sql = strings.Replace(sql, upgradeSQL(leases), "", 1)
	}
	return sql, nil
}
