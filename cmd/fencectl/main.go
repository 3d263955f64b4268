// Command fencectl is the operator's tool for fencekit's locks and fenced
// stores on every backend with a lock server: Redis, PostgreSQL,
// MySQL/MariaDB, DynamoDB, etcd and NATS JetStream KV, in one binary (a
// module of its own, so that the library's module never holds the AWS
// SDK, etcd's or NATS's client):
//
//	go -C cmd/fencectl install .
//
// It lets an operator see who holds a lock or the permits of a semaphore or
// read-write lock, list the held locks and permits, read a key's fence,
// break a stuck lock or permit safely, and raise every token after
// restoring a SQL database, a NATS lease bucket or a DynamoDB table from a
// backup.
//
// Usage:
//
//	fencectl [flags] inspect NAME
//	fencectl [flags] list [PREFIX]
//	fencectl [flags] fence KEY
//	fencectl [flags] release --force NAME --fence KEY [--fence KEY...]
//	fencectl [flags] release --force NAME --no-fence
//	fencectl [flags] release --force NAME --owner OWNER --no-fence
//	fencectl [flags] bump --by N
//	fencectl [flags] watch [PREFIX] [--interval D] [--count N]
//
// Flags may come before or after the command. Each backend has one flag
// that names its server, with a variable as its default: --redis-url
// (FENCEKIT_REDIS_URL), --postgres-url (FENCEKIT_POSTGRES_URL),
// --mysql-url (FENCEKIT_MYSQL_URL, a go-sql-driver/mysql DSN,
// user:password@tcp(host:port)/database), --dynamodb-url
// (FENCEKIT_DYNAMODB_URL, the endpoint URL, such as
// https://dynamodb.eu-west-1.amazonaws.com), --etcd-endpoints
// (FENCEKIT_ETCD_ENDPOINTS, comma-separated client URLs) and --nats-url
// (FENCEKIT_NATS_URL, comma-separated server URLs). The backend is the one
// whose flag the command line gives, else the one whose variable is set;
// when several are, --backend chooses: redis, postgres (adapters/postgres,
// pgx), mysql (adapters/sqldb), postgres-sqldb (PostgreSQL through
// database/sql and adapters/sqldb; the tables are the same as postgres's),
// dynamodb, etcd or nats. --help lists the flags grouped by backend; a
// backend's own flags are refused with another backend, where they would
// be ignored.
//
// Where the locks and the fenced store are: Redis and etcd keys under
// --prefix (locks) and --store-prefix (fenced store), each with its
// adapter's default ("fencekit", "fencekit/"), --redis-cluster saying that
// the Redis URL names a Cluster (redis://host:port?addr=host2:port2&addr=...);
// SQL rows in --lease-table and --store-table ("schema.table",
// "database.table" on MySQL, or "table"); NATS keys in the KV buckets
// --nats-bucket (FENCEKIT_NATS_BUCKET, the leases) and --nats-store-bucket
// (FENCEKIT_NATS_STORE_BUCKET, the fenced store; fence and release --fence
// refuse without it, as fencectl cannot guess it), under --prefix and
// --store-prefix; DynamoDB items in the table --dynamodb-table
// (FENCEKIT_DYNAMODB_TABLE, needed; the fenced store's is
// --dynamodb-store-table, the same table when not given) under --prefix
// (default "fencekit-lock/") and --store-prefix (default "", a Store's own),
// signed for --dynamodb-region (default us-east-1) with the AWS SDK's
// default credentials. Output is text, or JSON with --json.
//
// release --force evicts a live holder safely: it first raises the fence of
// every key named by --fence to one above the holder's token, so that the
// evicted holder's writes to them are refused from then on, and only then
// deletes the lease (compare-and-delete on the holder's owner, so a newer
// holder is never touched). The keys are those of the fenced store (Store
// or Guard resources); writes the holder makes elsewhere are not fenced by
// it. A key with no record (neither fence nor value) where fencectl looks
// for the store is refused, with nothing changed, unless --allow-unwritten:
// a store looked for in the wrong place shows every key so, and a fence
// raised there would protect nothing. fence and release print where they
// looked.
//
// Semaphores and read-write locks live on permit names apart from locks:
// inspect NAME shows the permit name's shape, waiters and each permit
// (kind, owner, token, TTL) as well as the lock NAME; list and watch have
// one row per permit, with a KIND column (lock, semaphore N, read, write).
// release --force evicts one permit, the one of --owner OWNER where
// several hold (without it fencectl lists them and exits with 2).
//
// bump --by N raises every token counter of a SQL lease table by N, the
// floor row included (PostgreSQL and MySQL alike): run it after restoring
// the database, before the applications start again (see
// docs/operations.md). On NATS it purges the lease bucket and raises its
// stream sequence by N. On DynamoDB it raises the token counter of every
// lock and permit name under --prefix by N. On Redis and etcd it refuses
// and says why.
//
// watch redraws a table of the held locks (token, TTL, metadata, and the
// waiters in line) every --interval with plain ANSI (cursor
// home, erase screen), until q or Ctrl-C, or --count refreshes; --timeout
// then bounds each refresh. With --json it prints one line per refresh.
//
// The command's code is package internal/fencectl; the DynamoDB, etcd and
// NATS backends are the packages fencectlbackend of their adapters' modules,
// imported here for their init.
//
// Exit codes:
//
//	0  done: the state was reported, or the change was made
//	1  failed: the server was unreachable (one line: "cannot reach ..."),
//	   a statement or script failed, or a fence could not be raised (then
//	   the lease was left alone)
//	2  usage: bad flags or arguments (a --timeout of zero or less, a flag
//	   of another backend), no server URL, bad input, a command the
//	   backend does not support, or a --fence key with no record (nothing
//	   was changed)
//	3  nothing to do: release found the lock free
package main

import (
	"os"

	_ "github.com/fencekit/fencekit/adapters/dynamodb/fencectlbackend"
	_ "github.com/fencekit/fencekit/adapters/etcd/fencectlbackend"
	_ "github.com/fencekit/fencekit/adapters/nats/fencectlbackend"
	"github.com/fencekit/fencekit/internal/fencectl"
)

func main() { os.Exit(fencectl.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)) }
