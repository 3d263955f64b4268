package fencectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fencekit/adapters/postgres"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// ctl runs fencectl with args and an environment of env, and returns its
// exit code, stdout and stderr.
func ctl(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, nil, &out, &errOut, func(k string) string { return env[k] })
	t.Logf("$ fencectl %s\n%s%s(exit %d)", strings.Join(args, " "), out.String(), errOut.String(), code)
	return code, out.String(), errOut.String()
}

// world is a backend and store, a flag set that points fencectl at them,
// and the environment it runs in.
type world struct {
	// migrate, when set, creates what the backend needs beyond what the
	// world's constructor made.
	migrate func(t *testing.T)
	backend driver.Backend
	store   fence.Store
	flags   []string
	env     map[string]string
	bumps   bool
	// elsewhere makes an empty store in another place than store's (a
	// prefix or a table) and returns the flags that point fencectl there.
	elsewhere func(t *testing.T) []string
	// storeAt is what fencectl says of where store is.
	storeAt string
}

func redisWorld(t *testing.T) world {
	client := testkit.Redis(t)
	prefix := testkit.RedisPrefix(t, client)
	return world{
		backend: fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix}),
		store:   fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: prefix + "s"}),
		flags:   []string{"--prefix", prefix, "--store-prefix", prefix + "s"},
		env:     map[string]string{"FENCEKIT_REDIS_URL": testkit.RedisURL(t)},
		elsewhere: func(*testing.T) []string {
			return []string{"--store-prefix", prefix + "elsewhere"}
		},
		storeAt: fmt.Sprintf("Redis, key prefix %q (--store-prefix)", prefix+"s"),
	}
}

func postgresWorld(t *testing.T) world {
	url := testkit.PostgresURL(t)
	pool := testkit.PostgresAt(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, postgres.Migrate(ctx, pool, nil))
	schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
	return world{
		backend: postgres.NewBackend(pool, nil),
		store:   postgres.NewStore(pool, nil),
		flags:   []string{"--lease-table", schema + ".fencekit_leases", "--store-table", schema + ".fencekit_store"},
		env:     map[string]string{"FENCEKIT_POSTGRES_URL": url},
		bumps:   true,
		elsewhere: func(t *testing.T) []string {
			require.NoError(t, postgres.Migrate(testkit.Context(t), pool, &postgres.Options{StoreTable: pgx.Identifier{"fencekit_store_b"}}))
			return []string{"--store-table", schema + ".fencekit_store_b"}
		},
		storeAt: "table " + schema + ".fencekit_store (--store-table)",
	}
}

// mysqlWorld is a fresh database of its own on the MySQL/MariaDB server,
// with sqldb's tables, named by FENCEKIT_MYSQL_URL.
func mysqlWorld(t *testing.T) world {
	cfg := testkit.MySQLConfig(t)
	db := testkit.OpenMySQL(t, cfg)
	require.NoError(t, sqldb.Migrate(testkit.Context(t), db, sqldb.MySQL, nil))
	return world{
		backend: sqldb.NewBackend(db, sqldb.MySQL, nil),
		store:   sqldb.NewStore(db, sqldb.MySQL, nil),
		env:     map[string]string{"FENCEKIT_MYSQL_URL": cfg.FormatDSN()},
		bumps:   true,
		elsewhere: func(t *testing.T) []string {
			require.NoError(t, sqldb.Migrate(testkit.Context(t), db, sqldb.MySQL, &sqldb.Options{StoreTable: sqldb.Identifier{"fencekit_store_b"}}))
			return []string{"--store-table", "fencekit_store_b"}
		},
		storeAt: "table fencekit_store (--store-table)",
	}
}

// postgresSQLWorld is PostgreSQL as a service on adapters/sqldb sees it
// (database/sql, pgx's driver), and fencectl --backend postgres-sqldb.
func postgresSQLWorld(t *testing.T) world {
	w := postgresWorld(t)
	db := stdlib.OpenDBFromPool(testkit.PostgresAt(t, w.env["FENCEKIT_POSTGRES_URL"]))
	t.Cleanup(func() { _ = db.Close() })
	schema := w.flags[1][:strings.IndexByte(w.flags[1], '.')]
	opts := &sqldb.Options{StoreTable: sqldb.Identifier{schema, "fencekit_store"}, LeaseTable: sqldb.Identifier{schema, "fencekit_leases"}}
	// sqldb keeps its permits in tables of its own beside postgres's: the
	// permit tests create them; the lock tests run without them, as a
	// service that only ever took locks and migrated with postgres.Migrate.
	w.migrate = func(t *testing.T) {
		require.NoError(t, sqldb.Migrate(testkit.Context(t), db, sqldb.PostgreSQL, opts))
	}
	w.backend = sqldb.NewBackend(db, sqldb.PostgreSQL, opts)
	w.store = sqldb.NewStore(db, sqldb.PostgreSQL, opts)
	w.flags = append([]string{"--backend", "postgres-sqldb"}, w.flags...)
	return w
}

func (w world) args(args ...string) []string { return append(append([]string{}, w.flags...), args...) }

// TestRedis and TestPostgres drive every command against a lock that a
// client holds and keeps alive, as a running program would.
func TestRedis(t *testing.T) {
	t.Parallel()
	operate(t, redisWorld(t))
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	operate(t, postgresWorld(t))
}

// TestMySQL and TestPostgresSQL drive every command on the SQL backends
// of adapters/sqldb.
func TestMySQL(t *testing.T) {
	t.Parallel()
	operate(t, mysqlWorld(t))
}

func TestPostgresSQL(t *testing.T) {
	t.Parallel()
	operate(t, postgresSQLWorld(t))
}

func operate(t *testing.T, w world) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := lock.New(w.backend, &lock.Options{Metadata: "host=worker-7 pid=4242", KeepAlive: true})
	lease, err := client.Acquire(ctx, "jobs/nightly", 10*time.Second)
	require.NoError(t, err)
	defer lease.Release(context.Background())
	writer := lease.Fenced(w.store)
	require.NoError(t, writer.Put(ctx, "report", []byte("v1")))
	other, err := client.Acquire(ctx, "other/x", 10*time.Second)
	require.NoError(t, err)
	defer other.Release(context.Background())

	t.Run("inspect", func(t *testing.T) {
		code, out, _ := ctl(t, w.env, w.args("inspect", "jobs/nightly")...)
		require.Equal(t, exitOK, code)
		require.Contains(t, out, "jobs/nightly: held")
		require.Contains(t, out, "host=worker-7 pid=4242")
		require.Contains(t, out, lease.Owner())

		code, out, _ = ctl(t, w.env, w.args("--json", "inspect", "jobs/nightly")...)
		require.Equal(t, exitOK, code)
		var v lockView
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		require.Equal(t, lockView{Name: "jobs/nightly", Held: true, Kind: "lock", Owner: lease.Owner(), Metadata: "host=worker-7 pid=4242", Token: int64(lease.Token()), TTLMs: v.TTLMs}, v)
		require.True(t, v.TTLMs > 0 && v.TTLMs <= 10000, v.TTLMs)

		code, out, _ = ctl(t, w.env, w.args("inspect", "jobs/none")...)
		require.Equal(t, exitOK, code)
		require.Equal(t, "jobs/none: free\n", out)
	})

	t.Run("list", func(t *testing.T) {
		code, out, _ := ctl(t, w.env, w.args("list", "jobs/")...)
		require.Equal(t, exitOK, code)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Equal(t, 2, len(lines), out)
		require.True(t, strings.HasPrefix(lines[1], "jobs/nightly "), lines[1])
		require.Contains(t, lines[1], "host=worker-7 pid=4242")

		code, out, _ = ctl(t, w.env, w.args("list", "--json")...)
		require.Equal(t, exitOK, code)
		var vs []lockView
		require.NoError(t, json.Unmarshal([]byte(out), &vs))
		require.Equal(t, 2, len(vs), vs)
		require.Equal(t, "jobs/nightly", vs[0].Name)
		require.Equal(t, "other/x", vs[1].Name)
	})

	t.Run("fence", func(t *testing.T) {
		code, out, _ := ctl(t, w.env, w.args("--json", "fence", "report")...)
		require.Equal(t, exitOK, code)
		var v fenceView
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		require.Equal(t, fenceView{Key: "report", Fence: int64(lease.Token()), HasValue: true, ValueBytes: 2, Store: w.storeAt}, v)
		code, out, _ = ctl(t, w.env, w.args("fence", "never")...)
		require.Equal(t, exitOK, code)
		require.Equal(t, "never: no fence, no value in "+w.storeAt+": never written there, or the store is elsewhere\n", out)
	})

	// Hardening IV, 6: a store looked for where it does not live (another
	// prefix or table) shows no record for a key that has one; release
	// --force --fence refuses rather than raise a fence there and report
	// the key protected, and changes nothing.
	t.Run("store elsewhere", func(t *testing.T) {
		wrong := w.elsewhere(t)
		code, out, _ := ctl(t, w.env, append(w.args("fence", "report"), wrong...)...)
		require.Equal(t, exitOK, code)
		require.Contains(t, out, "report: no fence, no value in ")
		require.Contains(t, out, "or the store is elsewhere")
		code, out, errOut := ctl(t, w.env, append(w.args("release", "--force", "jobs/nightly", "--fence", "report"), wrong...)...)
		require.Equal(t, exitUsage, code)
		require.Equal(t, "", out)
		require.Contains(t, errOut, `--fence "report": no record (no fence, no value) in `)
		require.Contains(t, errOut, "--allow-unwritten")
		require.Contains(t, errOut, "the lease on jobs/nightly was left alone")
		info, err := w.backend.Inspect(ctx, "jobs/nightly", driver.Exclusive)
		require.NoError(t, err)
		require.Equal(t, 1, len(info.Holders))
		require.Equal(t, lease.Owner(), info.Holders[0].Owner)
		require.Nil(t, lease.Err())
		// Nothing was written where the store is not.
		code, out, _ = ctl(t, w.env, append(w.args("--json", "fence", "report"), wrong...)...)
		require.Equal(t, exitOK, code)
		var v fenceView
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		require.Equal(t, int64(0), v.Fence)
		require.False(t, v.HasValue)
	})

	t.Run("watch", func(t *testing.T) {
		code, out, _ := ctl(t, w.env, w.args("--json", "watch", "jobs/", "--count", "2", "--interval", "10ms")...)
		require.Equal(t, exitOK, code)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Equal(t, 2, len(lines), out)
		for _, line := range lines {
			var v watchView
			require.NoError(t, json.Unmarshal([]byte(line), &v))
			require.Equal(t, "", v.Error)
			require.Equal(t, 1, len(v.Locks), v)
			require.Equal(t, "jobs/nightly", v.Locks[0].Name)
			require.Equal(t, int64(lease.Token()), v.Locks[0].Token)
			require.Equal(t, "host=worker-7 pid=4242", v.Locks[0].Metadata)
			require.True(t, v.Locks[0].TTLMs > 0, v)
		}

		code, out, _ = ctl(t, w.env, w.args("watch", "--count", "2", "--interval", "10ms")...)
		require.Equal(t, exitOK, code)
		screens := strings.Split(out, clearScreen)
		require.Equal(t, 3, len(screens), out) // "", then one screen per refresh
		for _, screen := range screens[1:] {
			require.Contains(t, screen, ": 2 held (q quits)")
			require.Contains(t, screen, "NAME")
			require.Contains(t, screen, "host=worker-7 pid=4242")
			require.Contains(t, screen, "other/x")
		}
	})

	t.Run("release refuses without --force or keys", func(t *testing.T) {
		code, _, errOut := ctl(t, w.env, w.args("release", "jobs/nightly", "--fence", "report")...)
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "--force")
		code, _, errOut = ctl(t, w.env, w.args("release", "--force", "jobs/nightly")...)
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "--fence KEY")
		require.Nil(t, lease.Err(), "the lease must be untouched")
	})

	if w.bumps {
		t.Run("release stops when a fence cannot be raised", func(t *testing.T) {
			args := append(w.args("release", "--force", "jobs/nightly", "--fence", "report"), "--store-table", "no_such_table")
			code, _, errOut := ctl(t, w.env, args...)
			require.Equal(t, exitFailed, code)
			require.Contains(t, errOut, "the lease on jobs/nightly was left alone")
			info, err := w.backend.Inspect(ctx, "jobs/nightly", driver.Exclusive)
			require.NoError(t, err)
			require.Equal(t, 1, len(info.Holders))
			require.Equal(t, lease.Owner(), info.Holders[0].Owner)
			require.Nil(t, lease.Err())
		})
	}

	t.Run("release --force", func(t *testing.T) {
		high := lease.Token() + 100
		require.NoError(t, w.store.Advance(ctx, "high", high))
		// audit has no record yet: refused without --allow-unwritten,
		// before any fence is raised.
		code, _, errOut := ctl(t, w.env, w.args("release", "--force", "jobs/nightly", "--fence", "report", "--fence", "audit", "--fence", "high")...)
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, `--fence "audit": no record (no fence, no value) in `+w.storeAt)
		require.False(t, strings.Contains(errOut, `"report"`), errOut)
		rec, err := w.store.Get(ctx, "report")
		require.NoError(t, err)
		require.Equal(t, lease.Token(), rec.Fence)
		require.Nil(t, lease.Err())
		code, _, errOut = ctl(t, w.env, w.args("release", "--force", "jobs/nightly", "--no-fence", "--allow-unwritten")...)
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "--allow-unwritten applies to --fence keys")

		code, out, _ := ctl(t, w.env, w.args("--json", "release", "--force", "jobs/nightly", "--fence", "report", "--fence", "audit", "--fence", "high", "--allow-unwritten")...)
		require.Equal(t, exitOK, code)
		var v releaseView
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		past := int64(lease.Token()) + 1
		require.Equal(t, releaseView{Name: "jobs/nightly", Kind: "lock", Token: int64(lease.Token()), Owner: lease.Owner(), Metadata: "host=worker-7 pid=4242",
			Fenced: []fencedView{{"report", past}, {"audit", past}, {"high", int64(high)}}, Store: w.storeAt, Released: true}, v)
		// A fence already past the holder's token is left as it was.
		rec, err = w.store.Get(ctx, "high")
		require.ErrorIs(t, err, fence.ErrNotFound)
		require.Equal(t, high, rec.Fence)

		// The evicted holder's writes are refused, on a key it had
		// written and on one it had not.
		require.ErrorIs(t, writer.Put(ctx, "report", []byte("late")), fence.ErrStale)
		require.ErrorIs(t, writer.Put(ctx, "audit", []byte("late")), fence.ErrStale)
		rec, err = w.store.Get(ctx, "report")
		require.NoError(t, err)
		require.Equal(t, "v1", string(rec.Value))
		// Its lease is gone: the keep-alive's next renewal loses it.
		select {
		case <-lease.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("the evicted lease did not end")
		}
		require.ErrorIs(t, lease.Err(), lock.ErrLost)
		// The next holder writes under a greater token.
		next, err := lock.New(w.backend, nil).TryAcquire(ctx, "jobs/nightly", 10*time.Second)
		require.NoError(t, err)
		defer next.Release(context.Background())
		require.True(t, int64(next.Token()) >= past)
		require.NoError(t, next.Fenced(w.store).Put(ctx, "report", []byte("v2")))
		require.Nil(t, other.Err(), "another lock was touched")
	})

	t.Run("release of a free lock", func(t *testing.T) {
		code, _, errOut := ctl(t, w.env, w.args("release", "--force", "jobs/none", "--no-fence")...)
		require.Equal(t, exitNothing, code)
		require.Contains(t, errOut, "free")
	})

	t.Run("bump", func(t *testing.T) {
		code, out, errOut := ctl(t, w.env, w.args("--json", "bump", "--by", "1000")...)
		if !w.bumps {
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "not needed on Redis")
			return
		}
		require.Equal(t, exitOK, code)
		var v bumpView
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		require.Equal(t, int64(1000), v.By)
		require.True(t, v.Rows >= 3, v) // jobs/nightly, other/x and the new floor row
		// A lock's next token is above the bumped one.
		owner, err := lock.NewOwner()
		require.NoError(t, err)
		g, err := w.backend.Acquire(ctx, driver.Request{Name: "other/y", Owner: owner, TTL: time.Second, Kind: driver.Exclusive})
		require.NoError(t, err)
		require.True(t, g.Token > 1000, g.Token)
		code, _, _ = ctl(t, w.env, w.args("bump", "--by", "0")...)
		require.Equal(t, exitUsage, code)
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	env := map[string]string{}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, env, "no command"},
		{[]string{"frobnicate"}, env, "unknown command"},
		{[]string{"inspect"}, env, "inspect takes 1 argument"},
		{[]string{"list", "a", "b"}, env, "list takes 0 to 1 arguments"},
		{[]string{"inspect", "x", "--by", "3"}, env, "inspect does not take --by"},
		{[]string{"inspect", "x"}, env, "no server"},
		{[]string{"inspect", "x"}, map[string]string{"FENCEKIT_REDIS_URL": "redis://a", "FENCEKIT_POSTGRES_URL": "postgres://b"}, "choose one with --backend"},
		{[]string{"--backend", "etcd", "--redis-url", "redis://a", "inspect", "x"}, env, "unknown backend"},
		{[]string{"--redis-url", "nonsense://", "inspect", "x"}, env, "redis URL"},
		{[]string{"--mysql-url", "nonsense", "inspect", "x"}, env, "mysql DSN"},
		{[]string{"inspect", "x"}, map[string]string{"FENCEKIT_MYSQL_URL": "root@tcp(a)/b", "FENCEKIT_POSTGRES_URL": "postgres://b"}, "choose one with --backend"},
		{[]string{"--backend", "mysql", "inspect", "x"}, env, "--backend mysql needs --mysql-url"},
		{[]string{"--no-such-flag"}, env, "flag provided but not defined"},
		// A backend's own flag with another backend would be ignored.
		{[]string{"--redis-url", "redis://a", "--store-table", "t", "inspect", "x"}, env, "--store-table is a flag of postgres, mysql, postgres-sqldb; the backend here is redis"},
		{[]string{"--mysql-url", "root@tcp(a)/b", "--store-prefix", "p", "inspect", "x"}, env, "--store-prefix is a flag of redis; the backend here is mysql"},
		{[]string{"--postgres-url", "postgres://a", "--redis-cluster", "inspect", "x"}, env, "--redis-cluster is a flag of redis; the backend here is postgres"},
	} {
		code, _, errOut := ctl(t, tc.env, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("fencectl %q = exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, _, _ := ctl(t, env, "-h"); code != exitOK {
		t.Errorf("fencectl -h = exit %d; want 0", code)
	}
}

// A server that does not answer is a failure (exit 1), not a usage error.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	code, _, errOut := ctl(t, nil, "--redis-url", "redis://127.0.0.1:1/0", "--timeout", "2s", "inspect", "x")
	if code != exitFailed || !strings.Contains(errOut, "cannot reach Redis at 127.0.0.1:1") {
		t.Fatalf("exit %d, %q; want 1 and the address", code, errOut)
	}
	// A URL on the command line wins over those of the environment.
	env := map[string]string{"FENCEKIT_POSTGRES_URL": "postgres://a", "FENCEKIT_MYSQL_URL": "root@tcp(a)/b"}
	code, _, errOut = ctl(t, env, "--mysql-url", "root@tcp(127.0.0.1:1)/test", "--timeout", "2s", "inspect", "x")
	if code != exitFailed || !strings.Contains(errOut, "cannot reach MySQL at 127.0.0.1:1") {
		t.Fatalf("exit %d, %q; want 1 and the address", code, errOut)
	}
}

// On a Redis Cluster (--redis-cluster), every command works, and list walks
// every master.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := testkit.NewRedisCluster(t, 3)
	client := cluster.Client(t)
	addrs := cluster.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	prefix := testkit.RedisPrefix(t, client)
	operate(t, world{
		backend: fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix}),
		store:   fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: prefix + "s"}),
		flags:   []string{"--redis-cluster", "--prefix", prefix, "--store-prefix", prefix + "s"},
		env:     map[string]string{"FENCEKIT_REDIS_URL": url},
		elsewhere: func(*testing.T) []string {
			return []string{"--store-prefix", prefix + "elsewhere"}
		},
		storeAt: fmt.Sprintf("Redis, key prefix %q (--store-prefix)", prefix+"s"),
	})
}
