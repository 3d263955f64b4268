package sqldb

import (
	"fmt"

	"github.com/fencekit/fencekit/lock/driver"
)

// permitIdentifiers are the two tables of semaphores and read-write locks
// (acquirePermit) that go with the lease table leases, in the same
// database or schema: the lease table's name with "_permit_names" (one
// row per permit name: its shape, token counter and last writer, kept for
// ever) and "_permit_owners" (one row per owner of a name: its permit, or
// its place in line) appended. Permits live apart from the lease table, so
// that a semaphore and a lock of one name neither see nor block each
// other, and count their tokens apart.
func permitIdentifiers(leases Identifier) (names, owners Identifier) {
	names = append(Identifier{}, leases...)
	owners = append(Identifier{}, leases...)
	names[len(names)-1] += "_permit_names"
	owners[len(owners)-1] += "_permit_owners"
	return names, owners
}

// permitTables returns the two permit tables, quoted for d.
func (o *Options) permitTables(d Dialect) (names, owners string, err error) {
	_, lo := o.identifiers()
	ni, oi := permitIdentifiers(lo)
	if names, err = d.quote(ni); err != nil {
		return "", "", fmt.Errorf("sqldb: the permit table of LeaseTable: %w", err)
	}
	if owners, err = d.quote(oi); err != nil {
		return "", "", fmt.Errorf("sqldb: the permit table of LeaseTable: %w", err)
	}
	return names, owners, nil
}

// permitTablesSQL creates the permit tables.
//
// names: kind and max_permits are the name's shape (a semaphore and its
// limit, or a read-write lock; see kindCode), as set by the acquire that
// last found the name idle; token is the last token issued,
// last_writer the token of the newest write permit, arrivals the number of
// places ever added (the order of the line). The row is never deleted, so
// tokens keep rising for as long as the table lives.
//
// owners: one row per (name, owner), a permit when token is set and a
// place in line when it is NULL, so that an owner never has two places and
// its place turns into its permit in one write. prior_writer is the last
// writer when the permit was granted (a same-owner acquire returns it
// again); arrival orders the places; expires_at is on the server's clock,
// as the lease table's.
func permitTablesSQL(d Dialect, names, owners string) []string {
	if d == MySQL {
		return []string{
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
				"    `name`        VARBINARY(1024) NOT NULL PRIMARY KEY,\n"+
				"    `kind`        SMALLINT NOT NULL DEFAULT 0,\n"+
				"    `max_permits` INT NOT NULL DEFAULT 0,\n"+
				"    `token`       BIGINT NOT NULL DEFAULT 0,\n"+
				"    `last_writer` BIGINT NOT NULL DEFAULT 0,\n"+
				"    `arrivals`    BIGINT NOT NULL DEFAULT 0\n"+
				") ENGINE=InnoDB ROW_FORMAT=DYNAMIC", names),
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
				"    `name`         VARBINARY(1024) NOT NULL,\n"+
				"    `owner`        VARBINARY(1024) NOT NULL,\n"+
				"    `kind`         SMALLINT NOT NULL,\n"+
				"    `token`        BIGINT NULL,\n"+
				"    `prior_writer` BIGINT NOT NULL DEFAULT 0,\n"+
				"    `arrival`      BIGINT NOT NULL DEFAULT 0,\n"+
				"    `expires_at`   DATETIME(6) NOT NULL,\n"+
				"    PRIMARY KEY (`name`, `owner`)\n"+
				") ENGINE=InnoDB ROW_FORMAT=DYNAMIC", owners),
		}
	}
	return []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    name        text COLLATE "C" PRIMARY KEY,
    kind        smallint NOT NULL DEFAULT 0,
    max_permits integer NOT NULL DEFAULT 0,
    token       bigint NOT NULL DEFAULT 0,
    last_writer bigint NOT NULL DEFAULT 0,
    arrivals    bigint NOT NULL DEFAULT 0
)`, names),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    name         text COLLATE "C" NOT NULL,
    owner        text NOT NULL,
    kind         smallint NOT NULL,
    token        bigint,
    prior_writer bigint NOT NULL DEFAULT 0,
    arrival      bigint NOT NULL DEFAULT 0,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
)`, owners),
	}
}

// kindCode is how the kind columns store a permit kind: 1 for a semaphore,
// 2 for read, 3 for write, the codes of the tables' first version (0 in
// the names table: no shape yet). Tables written by an earlier version, and
// processes of one sharing them during an upgrade, read the same.
func kindCode(k driver.Kind) int {
	switch k {
	case driver.Semaphore:
		return 1
	case driver.Read:
		return 2
	case driver.Write:
		return 3
	}
	return 0
}

// codeKind is the permit kind that a kind column's code stores (see
// kindCode); 0 for none.
func codeKind(c int64) driver.Kind {
	switch c {
	case 1:
		return driver.Semaphore
	case 2:
		return driver.Read
	case 3:
		return driver.Write
	}
	return 0
}
