package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// Default table names.
const (
	DefaultStoreTable = "fencekit_store"
	DefaultLeaseTable = "fencekit_leases"
)

// Options configures where the tables live. A nil *Options means the
// defaults.
type Options struct {
	// StoreTable is the table of Store and Guard, optionally qualified
	// with a database (MySQL) or schema (PostgreSQL):
	// Identifier{"app", "fences"}. Default fencekit_store.
	StoreTable Identifier
	// LeaseTable is the table of Backend; default fencekit_leases.
	LeaseTable Identifier
}

// identifiers returns the two table names with the defaults applied.
func (o *Options) identifiers() (store, leases Identifier) {
	if o != nil {
		store, leases = o.StoreTable, o.LeaseTable
	}
	if len(store) == 0 {
		store = Identifier{DefaultStoreTable}
	}
	if len(leases) == 0 {
		leases = Identifier{DefaultLeaseTable}
	}
	return store, leases
}

// tables returns the quoted table names for d, or an error matching
// fence.ErrInvalid for an unknown dialect, a malformed name, or one table
// named as both.
func (o *Options) tables(d Dialect) (store, leases string, err error) {
	if err := d.valid(); err != nil {
		return "", "", err
	}
	so, lo := o.identifiers()
	if store, err = d.quote(so); err != nil {
		return "", "", fmt.Errorf("sqldb: StoreTable: %w", err)
	}
	if leases, err = d.quote(lo); err != nil {
		return "", "", fmt.Errorf("sqldb: LeaseTable: %w", err)
	}
	if store == leases {
		return "", "", sameTable(store)
	}
	if queue, err := d.quote(queueIdentifier(lo)); err == nil && queue == store {
		return "", "", fence.Invalid("sqldb: StoreTable %s is the queue table of LeaseTable %s; name it otherwise", store, leases)
	}
	if names, owners, err := o.permitTables(d); err == nil && (names == store || owners == store) {
		return "", "", fence.Invalid("sqldb: StoreTable %s is a permit table of LeaseTable %s; name it otherwise", store, leases)
	}
	return store, leases, nil
}

// queueTable returns the quoted name of the queue table of queued waiting
// (a Backend.Acquire with a Place): the lease table's name with "_queue"
// appended, in the same database or schema.
func (o *Options) queueTable(d Dialect) (string, error) {
	_, lo := o.identifiers()
	q, err := d.quote(queueIdentifier(lo))
	if err != nil {
		return "", fmt.Errorf("sqldb: the queue table of LeaseTable: %w", err)
	}
	return q, nil
}

func sameTable(name string) error {
	return fence.Invalid("sqldb: StoreTable and LeaseTable are both %s; the Store and the Backend need a table each", name)
}

// MigrateSQL returns the statements Migrate runs for d and opts, one per
// element, for review or for your own migration tool.
//
// MySQL: keys, lock names and owners are VARBINARY, so they compare byte
// by byte whatever the server's collation (case, trailing spaces and
// Unicode normalization forms make distinct keys); the 1024-byte key
// (fence.MaxKeyLen) fits InnoDB's 3072-byte index limit with ROW_FORMAT
// DYNAMIC. Expiry is a DATETIME(6) in UTC (UTC_TIMESTAMP(6)), so sessions
// with different time_zone settings agree. PostgreSQL: the schema of
// adapters/postgres (text COLLATE "C" keys, bytea values).
func MigrateSQL(d Dialect, opts *Options) ([]string, error) {
	store, leases, err := opts.tables(d)
	if err != nil {
		return nil, err
	}
	queue, err := opts.queueTable(d)
	if err != nil {
		return nil, err
	}
	// The permit tables are left out when their names do not fit (a
	// lease table name of more than 50 characters on MySQL, 49 bytes on
	// PostgreSQL), so that a schema that migrated before them still
	// does; the permit calls then refuse with fence.ErrInvalid.
	var permits []string
	if names, owners, err := opts.permitTables(d); err == nil {
		permits = permitTablesSQL(d, names, owners)
	}
	if d == MySQL {
		return append([]string{
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
				"    `key`   VARBINARY(1024) NOT NULL PRIMARY KEY,\n"+
				"    `value` LONGBLOB NULL,\n"+
				"    `fence` BIGINT NOT NULL CHECK (`fence` >= 1)\n"+
				") ENGINE=InnoDB ROW_FORMAT=DYNAMIC", store),
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
				"    `name`       VARBINARY(1024) NOT NULL PRIMARY KEY,\n"+
				"    `owner`      VARBINARY(1024) NULL,\n"+
				"    `token`      BIGINT NOT NULL CHECK (`token` >= 1),\n"+
				"    `expires_at` DATETIME(6) NULL,\n"+
				"    `metadata`   VARBINARY(1024) NULL\n"+
				") ENGINE=InnoDB ROW_FORMAT=DYNAMIC", leases),
			// The floor row (name ''), which a new lease row's token is
			// read from (see NewBackend), exists from the start: InnoDB
			// reads it under a shared lock, and when it is missing that
			// lock covers the gap where the first names go, so that two
			// acquirers of new names deadlock inserting into it. With
			// the row there, the lock is on that one record, below every
			// name. Its token 1 means a name's first token is 2.
			fmt.Sprintf("INSERT INTO %s (`name`, `token`) VALUES ('', 1) ON DUPLICATE KEY UPDATE `token` = `token`", leases),
			queueTableSQL(d, queue),
		}, permits...), nil
	}
	return append([]string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    key   text COLLATE "C" PRIMARY KEY,
    value bytea,
    fence bigint NOT NULL CHECK (fence >= 1)
)`, store),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    name       text COLLATE "C" PRIMARY KEY,
    owner      text,
    token      bigint NOT NULL CHECK (token >= 1),
    expires_at timestamptz,
    metadata   text
)`, leases),
		queueTableSQL(d, queue),
	}, permits...), nil
}

// Migrate creates the store and lease tables if they do not exist, with
// the queue table of queued waiting and the two permit tables of
// semaphores and read-write locks (see Backend.Acquire); on a database
// of an earlier version it adds those that are missing. It is
// idempotent, and safe to run from several processes at once: on MySQL
// each CREATE TABLE IF NOT EXISTS commits on its own (no multi-statement
// driver option is needed); on PostgreSQL they run in one transaction
// under an advisory lock. A database or schema named in Options must
// exist.
//
// Options whose two names denote one table (equal names, or a qualified
// and an unqualified name that resolve to the same table) are refused with
// an error matching fence.ErrInvalid, and nothing is created.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, opts *Options) error {
	if db == nil {
		return fence.Invalid("sqldb: migrate: nil *sql.DB")
	}
	stmts, err := MigrateSQL(d, opts)
	if err != nil {
		return err
	}
	if err := checkDistinctTables(ctx, db, d, opts); err != nil {
		return err
	}
	if d == MySQL {
		// DDL commits on its own in MySQL; concurrent CREATE TABLE IF NOT
		// EXISTS are serialised by the server's metadata locks.
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				return classify(ctx, d, "", "", "migrate", err)
			}
		}
		return nil
	}
	// PostgreSQL: two concurrent CREATE TABLE IF NOT EXISTS can collide in
	// the catalog, so the statements run in one transaction under the
	// advisory lock that adapters/postgres takes too.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return classify(ctx, d, "", "", "migrate", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
		return classify(ctx, d, "", "", "migrate", err)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return classify(ctx, d, "", "", "migrate", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return classify(ctx, d, "", "", "migrate", err)
	}
	return nil
}

// migrateLockKey is the PostgreSQL advisory lock Migrate holds while it
// creates tables: "fencekit" in ASCII, the key adapters/postgres uses.
const migrateLockKey int64 = 0x66656e63656b6974

// checkDistinctTables refuses two names that resolve to one table: the
// same database or schema (an unqualified name is in the connection's
// current one) and the same table name (compared without case when MySQL's
// lower_case_table_names folds it). Every name is a parameter.
func checkDistinctTables(ctx context.Context, db *sql.DB, d Dialect, opts *Options) error {
	so, lo := opts.identifiers()
	split := func(id Identifier) (schema sql.NullString, table string) {
		if len(id) == 2 {
			return sql.NullString{String: id[0], Valid: true}, id[1]
		}
		return sql.NullString{}, id[0]
	}
	ss, st := split(so)
	ls, lt := split(lo)
	var q string
	if d == MySQL {
		q = `SELECT COALESCE(?, DATABASE()) <=> COALESCE(?, DATABASE())
  AND IF(@@lower_case_table_names = 0, CAST(? AS BINARY) = CAST(? AS BINARY), LOWER(?) = LOWER(?))`
	} else {
		q = `SELECT coalesce($1::text, current_schema()) = coalesce($2::text, current_schema()) AND $3::text = $4::text`
	}
	args := []any{ss, ls, st, lt}
	if d == MySQL {
		args = append(args, st, lt)
	}
	var same sql.NullBool
	if err := db.QueryRowContext(ctx, q, args...).Scan(&same); err != nil {
		return classify(ctx, d, "", "", "migrate: compare table names", err)
	}
	if same.Valid && same.Bool {
		s, _ := d.quote(so)
		l, _ := d.quote(lo)
		return sameTable(strings.Join([]string{s, l}, " and "))
	}
	return nil
}
