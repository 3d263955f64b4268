package fencectlbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

func TestMain(m *testing.M) {
	if os.Getenv(dynalitetest.URLEnv) == "" {
		// fencectl signs with the SDK's default credential chain. dynalite
		// takes any key: give the chain one, so that it never asks the EC2
		// instance metadata service (an address off this machine).
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
			os.Setenv("AWS_ACCESS_KEY_ID", "fencekit")
			os.Setenv("AWS_SECRET_ACCESS_KEY", "fencekit-secret")
		}
		os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	}
	os.Exit(dynalitetest.Main(m))
}

// table is the table of this package's tests; they keep apart by prefix.
const table = "fencekit_fencectl"

// server returns the shared server with the test table made, and the
// environment that points fencectl at it.
func server(t *testing.T) (*dynalitetest.Server, map[string]string) {
	t.Helper()
	srv := dynalitetest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, fenceddb.Migrate(ctx, srv.Client(), table))
	env := map[string]string{urlEnv: srv.Endpoint}
	if r := os.Getenv(regionEnv); r != "" {
		env[regionEnv] = r
	}
	return srv, env
}

// ctl runs fencectl with args and env, and returns its exit code, stdout
// and stderr.
func ctl(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := fencectl.Main(args, nil, &out, &errOut, func(k string) string { return env[k] })
	t.Logf("$ fencectl %s\n%s%s(exit %d)", strings.Join(args, " "), out.String(), errOut.String(), code)
	return code, out.String(), errOut.String()
}

// TestDynamoDB drives every command of fencectl (fencectl.Main, what
// cmd/fencectl runs, with this package's backend registered) on the shared
// server against a lock that a client holds and keeps alive, as
// internal/fencectl's tests do on the other backends: inspect, list,
// fence, watch (its WAITERS column counting nobody in line), the refusals
// of release (a --store-prefix where the store is not among them),
// release --force raising the fence first, and bump raising the counters
// of the lock and of a permit name, so that the next tokens are above it.
func TestDynamoDB(t *testing.T) {
	srv, env := server(t)
	prefix := testkit.Namespace(t) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	backend, err := fenceddb.NewBackend(srv.Client(), table, &fenceddb.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	store, err := fenceddb.NewStore(srv.Client(), table, &fenceddb.StoreOptions{Prefix: prefix + "s/"})
	require.NoError(t, err)
	args := func(a ...string) []string {
		return append([]string{"--dynamodb-table", table, "--prefix", prefix, "--store-prefix", prefix + "s/"}, a...)
	}

	client := lock.New(backend, &lock.Options{Metadata: "host=worker-7 pid=4242", KeepAlive: true})
	lease, err := client.Acquire(ctx, "jobs/nightly", 10*time.Second)
	require.NoError(t, err)
	defer lease.Release(context.Background())
	writer := lease.Fenced(store)
	require.NoError(t, writer.Put(ctx, "report", []byte("v1")))

	code, out, _ := ctl(t, env, args("--json", "inspect", "jobs/nightly")...)
	require.Equal(t, 0, code)
	var info struct {
		Name, Owner, Metadata string
		Held                  bool
		Token                 int64
		TTLMs                 int64 `json:"ttl_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &info))
	require.True(t, info.Held)
	require.Equal(t, lease.Owner(), info.Owner)
	require.Equal(t, "host=worker-7 pid=4242", info.Metadata)
	require.Equal(t, int64(lease.Token()), info.Token)
	require.True(t, info.TTLMs > 0 && info.TTLMs <= 10000, info.TTLMs)
	code, out, _ = ctl(t, env, args("inspect", "jobs/nightly")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, "jobs/nightly: held")
	code, out, _ = ctl(t, env, args("inspect", "jobs/other")...)
	require.Equal(t, 0, code)
	require.Equal(t, "jobs/other: free\n", out)

	code, out, _ = ctl(t, env, args("--json", "list", "jobs/")...)
	require.Equal(t, 0, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, 1, len(list), out)
	require.Equal(t, "jobs/nightly", list[0]["name"])
	require.Equal(t, float64(lease.Token()), list[0]["token"])
	require.Equal(t, lease.Owner(), list[0]["owner"])
	code, out, _ = ctl(t, env, args("--json", "list", "none/")...)
	require.Equal(t, 0, code)
	require.Equal(t, "[]", strings.TrimSpace(out))

	code, out, _ = ctl(t, env, args("--json", "fence", "report")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, `"store": "DynamoDB table \"`+table+`\", key prefix \"`+prefix+`s/\" (--dynamodb-store-table, --store-prefix)"`)
	var fv map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &fv))
	require.Equal(t, float64(lease.Token()), fv["fence"])
	require.Equal(t, true, fv["has_value"])
	require.Equal(t, float64(2), fv["value_bytes"])

	code, out, _ = ctl(t, env, args("--json", "watch", "jobs/", "--count", "2", "--interval", "10ms")...)
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(out, `"name":"jobs/nightly"`), out)
	require.False(t, strings.Contains(out, `"error"`), out)
	code, out, _ = ctl(t, env, args("watch", "jobs/", "--count", "1")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, "WAITERS")
	row := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "jobs/nightly") {
			row = line
		}
	}
	require.True(t, strings.HasSuffix(strings.TrimSpace(row), " 0"), row)

	code, _, errOut := ctl(t, env, args("release", "jobs/nightly", "--fence", "report")...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--force")
	code, _, _ = ctl(t, env, args("release", "--force", "jobs/nightly")...)
	require.Equal(t, 2, code)
	require.Nil(t, lease.Err(), "the lease must be untouched")

	// --store-prefix naming where the store is not: fence finds no record
	// and release refuses to raise a fence there; so does another table.
	code, out, _ = ctl(t, env, append(args("fence", "report"), "--store-prefix", prefix+"elsewhere/")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, `report: no fence, no value in DynamoDB table "`+table+`", key prefix "`+prefix+`elsewhere/"`)
	code, _, errOut = ctl(t, env, append(args("release", "--force", "jobs/nightly", "--fence", "report"), "--store-prefix", prefix+"elsewhere/")...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `--fence "report": no record`)
	require.Contains(t, errOut, "the lease on jobs/nightly was left alone")
	code, out, errOut = ctl(t, env, append(args("fence", "report"), "--dynamodb-store-table", "fencekit_no_such_table")...)
	require.Equal(t, 1, code)
	require.Equal(t, "", out)
	require.Contains(t, errOut, `table "fencekit_no_such_table" does not exist`)
	require.Nil(t, lease.Err(), "the lease must be untouched")
	rec, err := store.Get(ctx, "report")
	require.NoError(t, err)
	require.Equal(t, lease.Token(), rec.Fence)

	code, out, _ = ctl(t, env, args("--json", "release", "--force", "jobs/nightly", "--fence", "report")...)
	require.Equal(t, 0, code)
	var rv struct {
		Released bool
		Fenced   []struct {
			Key   string
			Fence int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rv))
	require.True(t, rv.Released)
	require.Equal(t, 1, len(rv.Fenced))
	require.Equal(t, int64(lease.Token())+1, rv.Fenced[0].Fence)
	require.ErrorIs(t, writer.Put(ctx, "report", []byte("late")), fence.ErrStale)
	select {
	case <-lease.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the evicted lease did not end")
	}
	require.ErrorIs(t, lease.Err(), lock.ErrLost)

	code, _, errOut = ctl(t, env, args("release", "--force", "jobs/nightly", "--no-fence")...)
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "free")

	// bump: the lock's counter and a permit name's go up by N each time.
	permit, err := client.Semaphore("jobs/pool", 2).TryAcquire(ctx, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, permit.Release(ctx))
	code, _, errOut = ctl(t, env, args("bump")...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--by N")
	code, out, _ = ctl(t, env, args("--json", "bump", "--by", "1000")...)
	require.Equal(t, 0, code)
	var bv struct {
		By, Rows int64
		MaxToken int64 `json:"max_token"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &bv))
	require.Equal(t, int64(1000), bv.By)
	require.Equal(t, int64(2), bv.Rows, out)
	require.Equal(t, int64(max(lease.Token(), permit.Token()))+1000, bv.MaxToken, out)
	code, out, _ = ctl(t, env, args("bump", "--by", "1000")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, fmt.Sprintf("raised the token counters of 2 items (lock and permit names under prefix %q) in table %s by 1000", prefix, table))
	require.Contains(t, out, "every new token on a name is above every earlier one")
	next, err := lock.New(backend, nil).Acquire(ctx, "jobs/nightly", 10*time.Second)
	require.NoError(t, err)
	defer next.Release(context.Background())
	require.True(t, next.Token() > lease.Token()+2000, "token %d after two bumps over %d", next.Token(), lease.Token())
	require.NoError(t, next.Fenced(store).Put(ctx, "report", []byte("v2")))
	p2, err := client.Semaphore("jobs/pool", 2).TryAcquire(ctx, 10*time.Second)
	require.NoError(t, err)
	defer p2.Release(context.Background())
	require.True(t, p2.Token() > permit.Token()+2000, "permit token %d after two bumps over %d", p2.Token(), permit.Token())

	// A prefix with nothing under it: nothing raised, and said so.
	code, out, _ = ctl(t, env, "--dynamodb-table", table, "--prefix", prefix+"none/", "bump", "--by", "10")
	require.Equal(t, 0, code)
	require.Contains(t, out, "nothing was raised")
}

// TestDynamoDBEnvAndDefaults: FENCEKIT_DYNAMODB_TABLE names the table, and
// --prefix and --store-prefix default to the adapter's: DefaultLockPrefix
// for the locks, and no prefix for the store (a Store made with nil
// options). The store may be in a table of its own
// (--dynamodb-store-table, FENCEKIT_DYNAMODB_STORE_TABLE).
func TestDynamoDBEnvAndDefaults(t *testing.T) {
	srv, env := server(t)
	ctx := testkit.Context(t)
	// The tables are this test's own, so that the default prefixes meet
	// no other test's items.
	lockTable := "fencekit_fencectl_" + strings.ReplaceAll(testkit.Namespace(t), "/", "_")
	storeTable := lockTable + "_store"
	for _, tb := range []string{lockTable, storeTable} {
		require.NoError(t, fenceddb.Migrate(ctx, srv.Client(), tb))
	}
	backend, err := fenceddb.NewBackend(srv.Client(), lockTable, nil)
	require.NoError(t, err)
	store, err := fenceddb.NewStore(srv.Client(), storeTable, nil)
	require.NoError(t, err)
	lease, err := lock.New(backend, nil).Acquire(ctx, "held/a", 10*time.Second)
	require.NoError(t, err)
	defer lease.Release(context.Background())
	require.NoError(t, lease.Fenced(store).Put(ctx, "k", []byte("v")))

	env[tableEnv] = lockTable
	code, out, _ := ctl(t, env, "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "held/a")
	// The store is not in the lock table.
	code, out, _ = ctl(t, env, "fence", "k")
	require.Equal(t, 0, code)
	require.Contains(t, out, `k: no fence, no value in DynamoDB table "`+lockTable+`", key prefix ""`)
	env[storeTableEnv] = storeTable
	code, out, _ = ctl(t, env, "--json", "fence", "k")
	require.Equal(t, 0, code)
	var fv map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &fv))
	require.Equal(t, float64(lease.Token()), fv["fence"])
	require.Equal(t, `DynamoDB table "`+storeTable+`", key prefix "" (--dynamodb-store-table, --store-prefix)`, fv["store"])
}

// TestDynamoDBPermits: list, inspect, watch and release --force see the
// permits of a semaphore and of a read-write lock (Hardening IV, 5).
func TestDynamoDBPermits(t *testing.T) {
	srv, env := server(t)
	prefix := testkit.Namespace(t) + "/"
	backend, err := fenceddb.NewBackend(srv.Client(), table, &fenceddb.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	fencectltest.Permits(t, backend, "jobs/", func(a ...string) (int, string, string) {
		return ctl(t, env, append([]string{"--dynamodb-table", table, "--prefix", prefix}, a...)...)
	})
}

// TestDynamoDBWatchWaiters: watch counts the waiter standing in line for a
// held lock, in --json and in the WAITERS column, and 0 for a lock nobody
// waits for.
func TestDynamoDBWatchWaiters(t *testing.T) {
	srv, env := server(t)
	prefix := testkit.Namespace(t) + "/"
	backend, err := fenceddb.NewBackend(srv.Client(), table, &fenceddb.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	args := func(a ...string) []string {
		return append([]string{"--dynamodb-table", table, "--prefix", prefix}, a...)
	}
	fencectltest.WatchWaiters(t, backend, func(a ...string) (int, string, string) { return ctl(t, env, args(a...)...) })
}

// TestDynamoDBUsage: the DynamoDB backend is chosen by its flag or
// variable, needs a table, and is named when it is missing; bad input is
// refused (exit 2, fence.ErrInvalid) before any request; another backend's
// flags are refused with it and its flags with another; a table that does
// not exist is reported.
func TestDynamoDBUsage(t *testing.T) {
	code, _, errOut := ctl(t, nil, "--backend", "dynamodb", "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--backend dynamodb needs --dynamodb-url or FENCEKIT_DYNAMODB_URL")
	code, _, errOut = ctl(t, map[string]string{urlEnv: "http://127.0.0.1:1", "FENCEKIT_REDIS_URL": "redis://b"}, "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "choose one with --backend")
	code, _, errOut = ctl(t, map[string]string{urlEnv: "http://127.0.0.1:1"}, "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--backend dynamodb needs --dynamodb-table or FENCEKIT_DYNAMODB_TABLE")
	code, _, errOut = ctl(t, map[string]string{urlEnv: "http://127.0.0.1:1"}, "inspect", "x", "--dynamodb-table")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "flag needs an argument: -dynamodb-table")
	for _, bad := range []string{"127.0.0.1:8000", "ftp://host/", "http://"} {
		code, _, errOut = ctl(t, nil, "--dynamodb-url", bad, "--dynamodb-table", "locks", "inspect", "x")
		require.Equal(t, 2, code, bad)
		require.Contains(t, errOut, "want an endpoint URL", bad)
	}
	code, _, errOut = ctl(t, map[string]string{urlEnv: "http://127.0.0.1:1"}, "--dynamodb-table", "ab", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `table name "ab"`)
	code, _, errOut = ctl(t, map[string]string{urlEnv: "http://127.0.0.1:1", tableEnv: "locks"}, "--prefix", strings.Repeat("p", fenceddb.MaxPrefixLen+1), "list")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "prefix")
	// The table flags are DynamoDB's: refused with another backend, where
	// they would be ignored; and another backend's with DynamoDB.
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_REDIS_URL": "redis://a:1"}, "--dynamodb-table", "t", "fence", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--dynamodb-table is a flag of dynamodb; the backend here is redis")
	code, _, errOut = ctl(t, map[string]string{urlEnv: "http://127.0.0.1:1"}, "--dynamodb-table", "locks", "--lease-table", "t", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--lease-table is a flag of postgres, mysql, postgres-sqldb; the backend here is dynamodb")

	// Bad input matches fence.ErrInvalid, from Open itself.
	ctx := testkit.Context(t)
	for _, o := range []fencectl.Options{
		{Addr: "http://127.0.0.1:1", Flags: map[string]string{}},
		{Addr: "127.0.0.1:1", Flags: map[string]string{tableFlag: "locks"}},
		{Addr: "http://127.0.0.1:1", Flags: map[string]string{tableFlag: "a"}},
		{Addr: "http://127.0.0.1:1", Flags: map[string]string{tableFlag: "locks", storeTableFlag: "b"}},
	} {
		_, err := openDynamoDB(ctx, o)
		require.ErrorIs(t, err, fence.ErrInvalid, "%+v", o)
	}

	// An endpoint that refuses connections.
	code, _, errOut = ctl(t, map[string]string{urlEnv: "http://127.0.0.1:1"}, "--dynamodb-table", "locks", "--timeout", "5s", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "fencectl: cannot reach DynamoDB at http://127.0.0.1:1")

	_, env := server(t)
	code, _, errOut = ctl(t, env, "--dynamodb-table", "fencekit_no_such_table", "inspect", "x")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `table "fencekit_no_such_table" does not exist at DynamoDB `+env[urlEnv])
	_, err := openDynamoDB(ctx, fencectl.Options{Addr: env[urlEnv], Flags: map[string]string{tableFlag: "fencekit_no_such_table", regionFlag: env[regionEnv]}})
	require.ErrorIs(t, err, fenceddb.ErrNoTable)
}
