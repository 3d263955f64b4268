package fencectlbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

func TestMain(m *testing.M) {
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
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

// TestEtcd drives every command of fencectl (fencectl.Main, what
// cmd/fencectl runs, with this package's backend registered) on the shared
// etcd cluster against a lock that a client holds and keeps alive, as
// internal/fencectl's tests do on the other backends: inspect, list, fence,
// watch, the refusals of release (a --store-prefix where the store is not
// among them), release --force raising the fence first, and bump's refusal.
func TestEtcd(t *testing.T) {
	eps := etcdtest.Endpoints(t)
	cl, err := etcdtest.NewClient(eps)
	require.NoError(t, err)
	defer cl.Close()
	prefix := testkit.Namespace(t) + "/"
	backend := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix})
	store := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: prefix + "s/"})
	env := map[string]string{"FENCEKIT_ETCD_ENDPOINTS": strings.Join(eps, ",")}
	args := func(a ...string) []string {
		return append([]string{"--prefix", prefix, "--store-prefix", prefix + "s/"}, a...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	code, out, _ = ctl(t, env, args("inspect", "jobs/nightly")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, "jobs/nightly: held")

	code, out, _ = ctl(t, env, args("--json", "list", "jobs/")...)
	require.Equal(t, 0, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, 1, len(list), out)
	require.Equal(t, "jobs/nightly", list[0]["name"])

	code, out, _ = ctl(t, env, args("--json", "fence", "report")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, `"store": "etcd, key prefix \"`+prefix+`s/\" (--store-prefix)"`)
	var fv map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &fv))
	require.Equal(t, float64(lease.Token()), fv["fence"])
	require.Equal(t, true, fv["has_value"])

	code, out, _ = ctl(t, env, args("--json", "watch", "jobs/", "--count", "2", "--interval", "10ms")...)
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(out, `"name":"jobs/nightly"`), out)

	code, _, errOut := ctl(t, env, args("release", "jobs/nightly", "--fence", "report")...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--force")
	code, _, _ = ctl(t, env, args("release", "--force", "jobs/nightly")...)
	require.Equal(t, 2, code)
	require.Nil(t, lease.Err(), "the lease must be untouched")

	// Hardening IV, 6: with --store-prefix naming where the store is not,
	// fence finds no record and release refuses to raise a fence there.
	wrong := append(args("fence", "report"), "--store-prefix", prefix+"elsewhere/")
	code, out, _ = ctl(t, env, wrong...)
	require.Equal(t, 0, code)
	require.Contains(t, out, `report: no fence, no value in etcd, key prefix "`+prefix+`elsewhere/"`)
	code, _, errOut = ctl(t, env, append(args("release", "--force", "jobs/nightly", "--fence", "report"), "--store-prefix", prefix+"elsewhere/")...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `--fence "report": no record`)
	require.Contains(t, errOut, "the lease on jobs/nightly was left alone")
	require.Nil(t, lease.Err(), "the lease must be untouched")
	require.NoError(t, writer.Put(ctx, "report", []byte("v1")))

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
	case <-time.After(20 * time.Second):
		t.Fatal("the evicted lease did not end")
	}
	require.ErrorIs(t, lease.Err(), lock.ErrLost)

	code, _, errOut = ctl(t, env, args("release", "--force", "jobs/nightly", "--no-fence")...)
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "free")

	code, _, errOut = ctl(t, env, args("bump", "--by", "1000")...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "bump does not apply to etcd")
	require.Contains(t, errOut, "etcdutl snapshot restore --bump-revision N --mark-compacted")
}

// TestEtcdUsage: the etcd backend is chosen by its flag or variable, and
// named when it is missing; another backend's flags are refused with it.
func TestEtcdUsage(t *testing.T) {
	code, _, errOut := ctl(t, map[string]string{"FENCEKIT_ETCD_ENDPOINTS": "http://a:1"}, "--store-table", "t", "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--store-table is a flag of postgres, mysql, postgres-sqldb; the backend here is etcd")
	code, _, errOut = ctl(t, nil, "--backend", "etcd", "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--backend etcd needs --etcd-endpoints or FENCEKIT_ETCD_ENDPOINTS")
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_ETCD_ENDPOINTS": "http://a:1", "FENCEKIT_REDIS_URL": "redis://b"}, "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "choose one with --backend")
}

// TestEtcdWatchWaiters: on etcd, which queues waiters, watch counts the
// waiter standing in line for a held lock, in --json and in the WAITERS
// column, and counts 0 for a lock nobody waits for.
func TestEtcdWatchWaiters(t *testing.T) {
	eps := etcdtest.Endpoints(t)
	cl, err := etcdtest.NewClient(eps)
	require.NoError(t, err)
	defer cl.Close()
	prefix := testkit.Namespace(t) + "/"
	backend := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix})
	env := map[string]string{"FENCEKIT_ETCD_ENDPOINTS": strings.Join(eps, ",")}
	args := func(a ...string) []string { return append([]string{"--prefix", prefix}, a...) }
	fencectltest.WatchWaiters(t, backend, func(a ...string) (int, string, string) { return ctl(t, env, args(a...)...) })
}
