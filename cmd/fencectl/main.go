// Command fencectl is the operator's tool for fencekit's locks and fenced
// stores on Redis, PostgreSQL and MySQL/MariaDB: see who holds a lock, list
// the held locks, read a key's fence, break a stuck lock safely, and raise
// every token after restoring a SQL database from a backup.
//
// Usage:
//
//	fencectl [flags] inspect NAME
//	fencectl [flags] list [PREFIX]
//	fencectl [flags] fence KEY
//	fencectl [flags] release --force NAME --fence KEY [--fence KEY...]
//	fencectl [flags] release --force NAME --no-fence
//	fencectl [flags] bump --by N
//	fencectl [flags] watch [PREFIX] [--interval D] [--count N]
//
// Flags may come before or after the command. The server comes from
// --redis-url, --postgres-url or --mysql-url, else from FENCEKIT_REDIS_URL,
// FENCEKIT_POSTGRES_URL or FENCEKIT_MYSQL_URL (a go-sql-driver/mysql DSN,
// user:password@tcp(host:port)/database); when several are set, --backend
// chooses: redis, postgres (adapters/postgres, pgx), mysql (adapters/sqldb)
// or postgres-sqldb (PostgreSQL through database/sql and adapters/sqldb;
// the tables are the same as postgres's).
// --redis-cluster says the Redis URL names a Cluster
// (redis://host:port?addr=host2:port2&addr=...).
// Redis keys are found under --prefix (locks) and --store-prefix (fenced
// store), SQL rows in --lease-table and --store-table ("schema.table",
// "database.table" on MySQL, or "table"), all with fencekit's defaults. Output is
// text, or JSON with --json.
//
// release --force evicts a live holder safely: it first raises the fence of
// every key named by --fence to one above the holder's token, so that the
// evicted holder's writes to them are refused from then on, and only then
// deletes the lease (compare-and-delete on the holder's owner, so a newer
// holder is never touched). The keys are those of the fenced store (Store
// or Guard resources); writes the holder makes elsewhere are not fenced by
// it.
//
// bump --by N raises every token counter of a SQL lease table by N, the
// floor row included (PostgreSQL and MySQL alike): run it after restoring
// the database, before the applications start again (see
// docs/operations.md). On Redis it refuses and says why none is needed.
//
// watch redraws a table of the held locks (token, TTL, metadata, and on
// Redis the waiters in line) every --interval with plain ANSI (cursor
// home, erase screen), until q or Ctrl-C, or --count refreshes; --timeout
// then bounds each refresh. With --json it prints one line per refresh.
//
// The command's code is package internal/fencectl; the etcd module builds
// the same command with an etcd backend, adapters/etcd/cmd/fencectl.
//
// Exit codes:
//
//	0  done: the state was reported, or the change was made
//	1  failed: the server was unreachable (one line: "cannot reach ..."),
//	   a statement or script failed, or a fence could not be raised (then
//	   the lease was left alone)
//	2  usage: bad flags or arguments (a --timeout of zero or less), no
//	   server URL, bad input, or a command the backend does not support
//	3  nothing to do: release found the lock free
package main

import (
	"os"

	"github.com/fencekit/fencekit/internal/fencectl"
)

func main() { os.Exit(fencectl.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)) }
