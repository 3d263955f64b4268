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

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

func TestMain(m *testing.M) {
	natstest.BuildFirst()
	code := m.Run()
	natstest.StopShared()
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

// TestNats drives every command of fencectl (fencectl.Main, what
// cmd/fencectl runs, with this package's backend registered) on the shared
// single-node server against a lock that a client holds and keeps alive, as
// internal/fencectl's tests do on the other backends: inspect, list, fence, watch (its WAITERS column
// counting nobody in line), the refusals of release, release --force raising the fence
// first, and bump. The leases and the fenced store are in
// buckets of their own (--nats-bucket, --nats-store-bucket).
func TestNats(t *testing.T) {
	urls := natstest.Single(t).URLs()
	_, js := natstest.Connect(t, urls)
	lockBucket, storeBucket := natstest.Bucket(t, js, 1), natstest.Bucket(t, js, 1)
	prefix := testkit.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := fencenats.NewBackend(ctx, js, lockBucket, &fencenats.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	store, err := fencenats.NewStore(ctx, js, storeBucket, &fencenats.StoreOptions{Prefix: prefix + ".s"})
	require.NoError(t, err)
	env := map[string]string{"FENCEKIT_NATS_URL": strings.Join(urls, ",")}
	args := func(a ...string) []string {
		return append([]string{"--nats-bucket", lockBucket, "--nats-store-bucket=" + storeBucket,
			"--prefix", prefix, "--store-prefix", prefix + ".s"}, a...)
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
	require.True(t, info.TTLMs > 0 && info.TTLMs <= 11000, info.TTLMs)
	code, out, _ = ctl(t, env, args("inspect", "jobs/nightly")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, "jobs/nightly: held")

	code, out, _ = ctl(t, env, args("--json", "list", "jobs/")...)
	require.Equal(t, 0, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, 1, len(list), out)
	require.Equal(t, "jobs/nightly", list[0]["name"])
	require.Equal(t, float64(lease.Token()), list[0]["token"])

	code, out, _ = ctl(t, env, args("--json", "fence", "report")...)
	require.Equal(t, 0, code)
	var fv map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &fv))
	require.Equal(t, float64(lease.Token()), fv["fence"])
	require.Equal(t, true, fv["has_value"])

	code, out, _ = ctl(t, env, args("--json", "watch", "jobs/", "--count", "2", "--interval", "10ms")...)
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(out, `"name":"jobs/nightly"`), out)
	code, out, _ = ctl(t, env, args("watch", "jobs/", "--count", "1")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, "jobs/nightly")
	require.Contains(t, out, "WAITERS")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "jobs/nightly") {
			require.True(t, strings.HasSuffix(strings.TrimSpace(line), " 0"), line)
		}
	}

	code, _, errOut := ctl(t, env, args("release", "jobs/nightly", "--fence", "report")...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--force")
	code, _, _ = ctl(t, env, args("release", "--force", "jobs/nightly")...)
	require.Equal(t, 2, code)
	require.Nil(t, lease.Err(), "the lease must be untouched")

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

	// bump: the lease bucket holds leases alone, so its sequence goes up
	// (the runbook itself is TestRestoreRunbook in adapters/nats).
	code, _, _ = ctl(t, env, args("bump")...)
	require.Equal(t, 2, code)
	code, out, _ = ctl(t, env, args("--json", "bump", "--by", "1000")...)
	require.Equal(t, 0, code)
	var bv struct {
		By, Rows int64
		MaxToken int64 `json:"max_token"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &bv))
	require.Equal(t, int64(1000), bv.By)
	require.True(t, bv.MaxToken >= int64(lease.Token())+1000, out)
	code, out, _ = ctl(t, env, args("bump", "--by", "1000")...)
	require.Equal(t, 0, code)
	require.Contains(t, out, "every new token is above it")
	next, err := lock.New(backend, nil).Acquire(ctx, "jobs/nightly", 10*time.Second)
	require.NoError(t, err)
	defer next.Release(context.Background())
	require.True(t, int64(next.Token()) > bv.MaxToken+1000, "token after two bumps")
	require.NoError(t, next.Fenced(store).Put(ctx, "report", []byte("v2")))
}

// TestNatsEnvBuckets: FENCEKIT_NATS_BUCKET names the bucket of the leases
// and FENCEKIT_NATS_STORE_BUCKET the fenced store's, here the same bucket,
// and --prefix and --store-prefix default to the adapter's DefaultPrefix
// (the bucket is the test's own). bump refuses that shared bucket
// (ErrBumpNotLeasesOnly, exit 2), changing nothing.
func TestNatsEnvBuckets(t *testing.T) {
	urls := natstest.Single(t).URLs()
	_, js := natstest.Connect(t, urls)
	bucket := natstest.Bucket(t, js, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	backend, err := fencenats.NewBackend(ctx, js, bucket, nil)
	require.NoError(t, err)
	store, err := fencenats.NewStore(ctx, js, bucket, nil)
	require.NoError(t, err)
	lease, err := lock.New(backend, nil).Acquire(ctx, "held/a", 10*time.Second)
	require.NoError(t, err)
	defer lease.Release(context.Background())
	require.NoError(t, lease.Fenced(store).Put(ctx, "k", []byte("v")))

	env := map[string]string{"FENCEKIT_NATS_URL": urls[0], "FENCEKIT_NATS_BUCKET": bucket, "FENCEKIT_NATS_STORE_BUCKET": bucket}
	code, out, _ := ctl(t, env, "--json", "fence", "k")
	require.Equal(t, 0, code)
	var fv map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &fv))
	require.Equal(t, float64(lease.Token()), fv["fence"])
	code, out, _ = ctl(t, env, "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "held/a")

	// bump refuses a bucket that the store shares: the purge would erase
	// the store's values and fences. Nothing changes.
	code, _, errOut := ctl(t, env, "bump", "--by", "1000")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "other than leases")
	require.Contains(t, errOut, "--nats-store-bucket")
	require.Nil(t, lease.Err())
	rec, err := store.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, lease.Token(), rec.Fence)
}

// TestNatsUsage: the NATS backend is chosen by its flag or variable, needs
// a bucket, and is named when it is missing; a bucket that does not exist
// is reported.
func TestNatsUsage(t *testing.T) {
	code, _, errOut := ctl(t, nil, "--backend", "nats", "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--backend nats needs --nats-url or FENCEKIT_NATS_URL")
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_NATS_URL": "nats://a:1", "FENCEKIT_REDIS_URL": "redis://b"}, "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "choose one with --backend")
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_NATS_URL": "nats://a:1"}, "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--backend nats needs --nats-bucket or FENCEKIT_NATS_BUCKET")
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_NATS_URL": "nats://a:1"}, "inspect", "x", "--nats-bucket")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "flag needs an argument: -nats-bucket")
	// The bucket flags are NATS's: refused with another backend, where
	// they would be ignored.
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_REDIS_URL": "redis://a:1"}, "--nats-store-bucket", "s", "fence", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--nats-store-bucket is a flag of nats; the backend here is redis")
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_NATS_URL": "nats://a:1"}, "--nats-bucket", "b", "--lease-table", "t", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--lease-table is a flag of postgres, mysql, postgres-sqldb; the backend here is nats")

	urls := natstest.Single(t).URLs()
	code, _, errOut = ctl(t, map[string]string{"FENCEKIT_NATS_URL": urls[0]}, "--nats-bucket", "no_such_bucket", "inspect", "x")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `bucket "no_such_bucket" does not exist`)
}

// TestNatsWatchWaiters: on NATS, which queues waiters, watch counts the
// waiter standing in line for a held lock, in --json and in the WAITERS
// column, and counts 0 for a lock nobody waits for.
func TestNatsWatchWaiters(t *testing.T) {
	urls := natstest.Single(t).URLs()
	_, js := natstest.Connect(t, urls)
	bucket := natstest.Bucket(t, js, 1)
	prefix := testkit.Namespace(t)
	ctx := testkit.Context(t)
	backend, err := fencenats.NewBackend(ctx, js, bucket, &fencenats.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	env := map[string]string{"FENCEKIT_NATS_URL": strings.Join(urls, ",")}
	args := func(a ...string) []string {
		return append([]string{"--nats-bucket", bucket, "--prefix", prefix}, a...)
	}
	fencectltest.WatchWaiters(t, backend, func(a ...string) (int, string, string) { return ctl(t, env, args(a...)...) })
}

// TestNatsStoreInOwnBucket (Hardening IV, 6): the fenced store lives in a
// bucket of its own, as docs/operations.md recommends. fencectl cannot
// guess it: without --nats-store-bucket, fence and release --force --fence
// refuse (exit 2) and name the flag, rather than look in the lease bucket,
// report "no fence" and raise a fence there that protects nothing; named
// wrong (the lease bucket), fence says where it found no record and release
// refuses that key; named right, fence finds the real record and release
// fences it, so that the evicted holder's write is refused.
func TestNatsStoreInOwnBucket(t *testing.T) {
	urls := natstest.Single(t).URLs()
	_, js := natstest.Connect(t, urls)
	lockBucket, storeBucket := natstest.Bucket(t, js, 1), natstest.Bucket(t, js, 1)
	ctx := testkit.Context(t)
	backend, err := fencenats.NewBackend(ctx, js, lockBucket, nil)
	require.NoError(t, err)
	store, err := fencenats.NewStore(ctx, js, storeBucket, nil)
	require.NoError(t, err)
	lease, err := lock.New(backend, &lock.Options{KeepAlive: true}).Acquire(ctx, "jobs/nightly", 10*time.Second)
	require.NoError(t, err)
	defer lease.Release(context.Background())
	writer := lease.Fenced(store)
	require.NoError(t, writer.Put(ctx, "report", []byte("v1")))
	env := map[string]string{"FENCEKIT_NATS_URL": strings.Join(urls, ","), "FENCEKIT_NATS_BUCKET": lockBucket}
	untouched := func() {
		t.Helper()
		info, err := backend.Inspect(ctx, "jobs/nightly", driver.Exclusive)
		require.NoError(t, err)
		require.Equal(t, 1, len(info.Holders))
		require.Equal(t, lease.Owner(), info.Holders[0].Owner)
		require.Nil(t, lease.Err())
		rec, err := store.Get(ctx, "report")
		require.NoError(t, err)
		require.Equal(t, lease.Token(), rec.Fence)
	}

	// No store bucket: refused, naming the flag.
	code, out, errOut := ctl(t, env, "fence", "report")
	require.Equal(t, 2, code)
	require.Equal(t, "", out)
	require.Contains(t, errOut, "fence: NATS keeps the fenced store in a KV bucket that fencectl cannot guess: name it with --nats-store-bucket")
	code, out, errOut = ctl(t, env, "release", "--force", "jobs/nightly", "--fence", "report")
	require.Equal(t, 2, code)
	require.Equal(t, "", out)
	require.Contains(t, errOut, "release --fence: NATS keeps the fenced store in a KV bucket that fencectl cannot guess")
	untouched()
	// Commands that read no store need no store bucket.
	code, out, _ = ctl(t, env, "inspect", "jobs/nightly")
	require.Equal(t, 0, code)
	require.Contains(t, out, "jobs/nightly: held")

	// The store bucket named wrong: no record there, and release refuses.
	code, out, _ = ctl(t, env, "--nats-store-bucket", lockBucket, "fence", "report")
	require.Equal(t, 0, code)
	require.Contains(t, out, `report: no fence, no value in NATS bucket "`+lockBucket+`"`)
	code, out, errOut = ctl(t, env, "--nats-store-bucket", lockBucket, "release", "--force", "jobs/nightly", "--fence", "report")
	require.Equal(t, 2, code)
	require.Equal(t, "", out)
	require.Contains(t, errOut, `--fence "report": no record (no fence, no value) in NATS bucket "`+lockBucket+`"`)
	require.Contains(t, errOut, "the lease on jobs/nightly was left alone")
	untouched()

	// Named right (here by its variable): the real record, and a fence
	// that refuses the evicted holder.
	env["FENCEKIT_NATS_STORE_BUCKET"] = storeBucket
	code, out, _ = ctl(t, env, "fence", "report")
	require.Equal(t, 0, code)
	require.Equal(t, fmt.Sprintf("report: fence %d, holds a value of 2 bytes\n", lease.Token()), out)
	code, out, _ = ctl(t, env, "release", "--force", "jobs/nightly", "--fence", "report")
	require.Equal(t, 0, code)
	require.Contains(t, out, fmt.Sprintf(`store: NATS bucket "%s", key prefix "fencekit"`, storeBucket))
	require.Contains(t, out, fmt.Sprintf("fence report: %d (token %d is refused there from now on)", lease.Token()+1, lease.Token()))
	require.ErrorIs(t, writer.Put(ctx, "report", []byte("late")), fence.ErrStale)
	rec, err := store.Get(ctx, "report")
	require.NoError(t, err)
	require.Equal(t, "v1", string(rec.Value))
	require.Equal(t, lease.Token()+1, rec.Fence)
}
