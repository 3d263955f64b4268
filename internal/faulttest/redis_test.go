package faulttest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/adapters/memory"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// plainRedis is a client as applications make them (go-redis retries on a
// broken connection), for scenarios where the server, not the network,
// misbehaves.
func plainRedis(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A Redis without persistence restarts under a holder: its lease and the
// token counter are gone, so another client takes the lock while the first
// still believes it holds it. Tokens keep rising all the same (they are
// minted from the server clock when the counter is missing), so a store
// that did not restart refuses the old holder; a store on the restarted
// server lost its fences too, and only the new holder's Advance closes it.
func TestRedisRestartWithoutPersistence(t *testing.T) {
	ctx := testCtx(t)
	srv := testkit.NewRedisServer(t)
	c := plainRedis(t, srv.Addr())
	prefix := testkit.Namespace(t)
	backend := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})
	sameServer := fenceredis.NewStore(c, &fenceredis.StoreOptions{Prefix: prefix})
	elsewhere := memory.NewStore() // a resource that does not restart
	client := lock.New(backend, nil)

	a, err := client.TryAcquire(ctx, "job", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, a.Fenced(elsewhere), "k", "a")
	mustPut(t, a.Fenced(sameServer), "barrier", "a")
	mustPut(t, a.Fenced(sameServer), "open", "a")

	srv.Stop()
	srv.Start()

	info, err := inspectLock(ctx, backend, "job")
	if err != nil {
		t.Fatal(err)
	}
	if info.Held {
		t.Fatalf("after a restart without persistence the lease is still there: %s", describe(info))
	}
	b, err := client.TryAcquire(ctx, "job", 30*time.Second)
	if err != nil {
		t.Fatalf("acquire after the restart: %v", err)
	}
	if a.Err() != nil {
		t.Fatalf("A's lease ended locally: %v; the point is that A still believes it holds the lock", a.Err())
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token %d after the restart, %d before: tokens went back", b.Token(), a.Token())
	}

	// The store that kept its data refuses A.
	mustPut(t, b.Fenced(elsewhere), "k", "b")
	expectStale(t, "A's write to the store that did not restart", a.Fenced(elsewhere).Put(ctx, "k", []byte("a2")))

	// The store on the restarted server lost its fences with its data.
	if rec, err := sameServer.Get(ctx, "barrier"); !errors.Is(err, fence.ErrNotFound) || rec.Fence != 0 {
		t.Fatalf("store on the restarted server: %v, fence %d; want it empty", err, rec.Fence)
	}
	// B's Advance raises the fence before B reads: A is refused from then on.
	if err := b.Fenced(sameServer).Advance(ctx, "barrier"); err != nil {
		t.Fatal(err)
	}
	expectStale(t, "A's write after B's Advance on the restarted store", a.Fenced(sameServer).Put(ctx, "barrier", []byte("a2")))
	// A key B has not touched yet has no fence left: A's write lands. This
	// is the limit of fencing on a store that loses data (see
	// docs/reliability.md), and why a holder Advances before it reads.
	if err := a.Fenced(sameServer).Put(ctx, "open", []byte("a2")); err != nil {
		t.Fatalf("A's write to a key with no fence left: %v (expected to land)", err)
	}
	_ = b.Release(ctx)
}

// replicatedPair starts a primary and a replica that replicates through a
// proxy, so that a test can stop replication at an exact point: refuse new
// connections and cut the link.
func replicatedPair(t *testing.T) (primary, replica *testkit.RedisServer, link *faultproxy.Proxy) {
	t.Helper()
	primary = testkit.NewRedisServer(t)
	link = testkit.NewProxy(t, primary.Addr())
	_, port, _ := net.SplitHostPort(link.Addr())
	replica = testkit.NewRedisServer(t, "--replicaof", "127.0.0.1", port)
	replica.WaitReplicating()
	primary.WaitReplicas(1)
	waitAcked(t, primary)
	return primary, replica, link
}

// waitAcked writes on primary and waits until its replica has acknowledged
// everything. A replica that has just finished its full sync reports
// state=online, but the primary only streams commands to it after its first
// REPLCONF ACK, which can take up to a second: until then WAIT counts it
// out.
func waitAcked(t *testing.T, primary *testkit.RedisServer) {
	t.Helper()
	if _, err := primary.Do("SET", "faulttest:acked", "1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		want := primary.Info("replication", "master_repl_offset")
		if replicaOffset(primary.Info("replication", "slave0")) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not acknowledge offset %s in 10s", want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replicaOffset returns the offset= field of an INFO slaveN line.
func replicaOffset(line string) string {
	for _, f := range strings.Split(line, ",") {
		if v, ok := strings.CutPrefix(f, "offset="); ok {
			return v
		}
	}
	return ""
}

func stopReplication(link *faultproxy.Proxy) {
	link.RefuseNew(true)
	link.CutAll()
}

// A replica is promoted before the lease reached it. Without the
// replication wait, the lease is lost in the failover and another client
// takes the lock, but with a higher token, so fenced stores refuse the old
// holder. With the wait, an acquire the replica has not acknowledged fails,
// and an acknowledged lease survives the promotion with its token.
func TestRedisReplicaPromotion(t *testing.T) {
	t.Run("without replication wait", func(t *testing.T) {
		ctx := testCtx(t)
		primary, replica, link := replicatedPair(t)
		prefix := testkit.Namespace(t)
		onPrimary := fenceredis.NewBackend(plainRedis(t, primary.Addr()), &fenceredis.BackendOptions{Prefix: prefix})
		onReplica := fenceredis.NewBackend(plainRedis(t, replica.Addr()), &fenceredis.BackendOptions{Prefix: prefix})
		store := memory.NewStore()

		// An earlier lease that did replicate: the replica knows its token.
		early, err := lock.New(onPrimary, nil).TryAcquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := early.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitAcked(t, primary)

		stopReplication(link)
		a, err := lock.New(onPrimary, nil).TryAcquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, a.Fenced(store), "k", "a")
		replica.Promote()

		info, err := inspectLock(ctx, onReplica, "job")
		if err != nil {
			t.Fatal(err)
		}
		if info.Held {
			t.Fatalf("the promoted replica has the unreplicated lease: %s", describe(info))
		}
		b, err := lock.New(onReplica, nil).TryAcquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatalf("acquire on the promoted replica: %v", err)
		}
		if a.Err() != nil {
			t.Fatalf("A's lease ended locally: %v", a.Err())
		}
		// A counter alone would give early+1, which may equal A's token;
		// the clock puts B above A.
		if !(early.Token() < a.Token() && a.Token() < b.Token()) {
			t.Fatalf("tokens early %d, A %d (lost in the failover), B %d: want strictly rising", early.Token(), a.Token(), b.Token())
		}
		mustPut(t, b.Fenced(store), "k", "b")
		expectStale(t, "A's write after the failover", a.Fenced(store).Put(ctx, "k", []byte("a2")))
	})

	t.Run("with replication wait", func(t *testing.T) {
		ctx := testCtx(t)
		primary, replica, link := replicatedPair(t)
		prefix := testkit.Namespace(t)
		wait := &fenceredis.BackendOptions{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond}
		onPrimary := fenceredis.NewBackend(plainRedis(t, primary.Addr()), wait)
		onReplica := fenceredis.NewBackend(plainRedis(t, replica.Addr()), &fenceredis.BackendOptions{Prefix: prefix})
		store := memory.NewStore()

		const ttl = 500 * time.Millisecond
		a, err := lock.New(onPrimary, nil).TryAcquire(ctx, "job", ttl)
		if err != nil {
			t.Fatalf("acquire with a healthy replica: %v", err)
		}
		mustPut(t, a.Fenced(store), "k", "a")

		stopReplication(link)
		// Now an acquire cannot be acknowledged: it fails, and the lease
		// it took is given back.
		_, err = lock.New(onPrimary, nil).TryAcquire(ctx, "other", time.Minute)
		if !errors.Is(err, fenceredis.ErrReplication) {
			t.Fatalf("acquire without a replica to acknowledge it: %v, want ErrReplication", err)
		}
		if info, err := inspectLock(ctx, onPrimary, "other"); err != nil || info.Held {
			t.Fatalf("the unacknowledged lease was not given back: %s, %v", describe(info), err)
		}

		replica.Promote()
		info, err := inspectLock(ctx, onReplica, "job")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Owner != a.Owner() || info.Token != a.Token() {
			t.Fatalf("the acknowledged lease did not survive the promotion: %s, want owner A and token %d", describe(info), a.Token())
		}
		if _, err := lock.New(onReplica, nil).TryAcquire(ctx, "job", time.Minute); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("acquire on the promoted replica while A's lease lives: %v, want ErrHeld", err)
		}
		waitFreeOn(t, onReplica, "job")
		b, err := lock.New(onReplica, nil).TryAcquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if b.Token() <= a.Token() {
			t.Fatalf("token %d after %d", b.Token(), a.Token())
		}
		mustPut(t, b.Fenced(store), "k", "b")
		expectStale(t, "A's write after its lease expired on the new primary", a.Fenced(store).Put(ctx, "k", []byte("a2")))
	})
}

// SCRIPT FLUSH in the middle of a lease: every operation reloads its script
// (NOSCRIPT is handled), and the lease, its token and the fences are as
// before.
func TestRedisScriptFlush(t *testing.T) {
	ctx := testCtx(t)
	srv := testkit.NewRedisServer(t)
	c := plainRedis(t, srv.Addr())
	prefix := testkit.Namespace(t)
	backend := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})
	store := fenceredis.NewStore(c, &fenceredis.StoreOptions{Prefix: prefix})
	client := lock.New(backend, nil)
	flush := func() {
		t.Helper()
		if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}

	a, err := client.TryAcquire(ctx, "job", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, a.Fenced(store), "k", "a1")
	flush()
	if err := a.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("extend after SCRIPT FLUSH: %v", err)
	}
	flush()
	mustPut(t, a.Fenced(store), "k", "a2")
	flush()
	if _, err := client.TryAcquire(ctx, "job", time.Second); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("acquire by another after SCRIPT FLUSH: %v, want ErrHeld", err)
	}
	flush()
	if ttl, err := a.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL after SCRIPT FLUSH: %v, %v", ttl, err)
	}
	flush()
	if err := a.Release(ctx); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	flush()
	b, err := client.TryAcquire(ctx, "job", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token %d after %d", b.Token(), a.Token())
	}
	flush()
	mustPut(t, b.Fenced(store), "k", "b")
	flush()
	expectStale(t, "the old holder after SCRIPT FLUSH", a.Fenced(store).Put(ctx, "k", []byte("a3")))
	flush()
	if rec, err := store.Get(ctx, "k"); err != nil || string(rec.Value) != "b" || rec.Fence != b.Token() {
		t.Fatalf("after SCRIPT FLUSH: %q fence %d, %v", rec.Value, rec.Fence, err)
	}
	_ = b.Release(context.Background())
}

// A Store on an asynchronously replicated Redis, failed over to a replica
// that missed the newest holder's writes. Without the replication wait the
// next holder is told its Advance and Put succeeded, the failover rolls them
// back with the fence, and the stale holder's write is accepted: the known
// limit of a Store on the same replicated Redis. With the wait, a write the
// replica has not acknowledged is reported as an unknown outcome (never as
// success, never as stale), the holder repeats it once replication is back,
// and after the promotion the stale holder is refused.
func TestRedisStoreReplicaPromotion(t *testing.T) {
	const stale, newer fence.Token = 10, 20 // A's token, and B's after A's lease ran out

	t.Run("with replication wait", func(t *testing.T) {
		ctx := testCtx(t)
		primary, replica, link := replicatedPair(t)
		prefix := testkit.Namespace(t)
		onPrimary := fenceredis.NewStore(plainRedis(t, primary.Addr()), &fenceredis.StoreOptions{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
		onReplica := fenceredis.NewStore(plainRedis(t, replica.Addr()), &fenceredis.StoreOptions{Prefix: prefix})

		if err := onPrimary.Put(ctx, "k", stale, []byte("a")); err != nil {
			t.Fatalf("A's write with the replica acknowledging: %v", err)
		}
		stopReplication(link)
		err := onPrimary.Advance(ctx, "k", newer)
		if !errors.Is(err, fenceredis.ErrReplication) || errors.Is(err, fence.ErrStale) {
			t.Fatalf("B's Advance that no replica acknowledged: %v; want ErrReplication (outcome unknown)", err)
		}
		t.Logf("B's Advance with replication cut: %v", err)

		// B does not go on after an unknown outcome: it repeats the
		// Advance (same token, safe) once the replica is back.
		link.RefuseNew(false)
		replica.WaitReplicating()
		waitAcked(t, primary)
		if err := onPrimary.Advance(ctx, "k", newer); err != nil {
			t.Fatalf("B's Advance repeated with the replica back: %v", err)
		}
		if err := onPrimary.Put(ctx, "k", newer, []byte("b")); err != nil {
			t.Fatalf("B's write: %v", err)
		}

		stopReplication(link)
		replica.Promote()
		expectStale(t, "A's write on the promoted replica", onReplica.Put(ctx, "k", stale, []byte("a2")))
		rec, err := onReplica.Get(ctx, "k")
		if err != nil || string(rec.Value) != "b" || rec.Fence != newer {
			t.Fatalf("after the promotion: %q fence %d, %v; want B's write", rec.Value, rec.Fence, err)
		}
	})

	t.Run("without replication wait", func(t *testing.T) {
		ctx := testCtx(t)
		primary, replica, link := replicatedPair(t)
		prefix := testkit.Namespace(t)
		onPrimary := fenceredis.NewStore(plainRedis(t, primary.Addr()), &fenceredis.StoreOptions{Prefix: prefix})
		onReplica := fenceredis.NewStore(plainRedis(t, replica.Addr()), &fenceredis.StoreOptions{Prefix: prefix})

		if err := onPrimary.Put(ctx, "k", stale, []byte("a")); err != nil {
			t.Fatal(err)
		}
		waitAcked(t, primary)
		stopReplication(link)
		// B is told both succeeded; neither reached the replica.
		if err := onPrimary.Advance(ctx, "k", newer); err != nil {
			t.Fatal(err)
		}
		if err := onPrimary.Put(ctx, "k", newer, []byte("b")); err != nil {
			t.Fatal(err)
		}
		replica.Promote()
		// The known limit: the fence rolled back with the data, and the
		// stale holder is accepted.
		if err := onReplica.Put(ctx, "k", stale, []byte("a2")); err != nil {
			t.Fatalf("A's write on the promoted replica: %v; without the wait it is accepted (the documented limit)", err)
		}
		rec, err := onReplica.Get(ctx, "k")
		if err != nil || string(rec.Value) != "a2" || rec.Fence != stale {
			t.Fatalf("after the promotion: %q fence %d, %v; want A's late write over B's lost one", rec.Value, rec.Fence, err)
		}
		t.Logf("without the wait: B's acknowledged write was lost in the failover and stale token %d was accepted", stale)
	})
}

// With go-redis's default options (no context deadlines on the socket) and
// the server's replies held back, a lease's keep-alive renewal gives up at
// the lease's local deadline, and Do returns soon after the lease is lost
// instead of waiting for go-redis's ReadTimeout.
func TestRedisDefaultClientBoundedByLeaseDeadline(t *testing.T) {
	ctx := testCtx(t)
	r := redisRig(t, "redis-defaults", defaultRedis, true)
	r.warm(t)
	const readTimeout = 5 * time.Second // go-redis v9.23's default
	name := unique(t, "lock")
	var lostAt time.Time
	err := lock.New(r.backend, nil).Do(ctx, name, 4*r.ttl, func(ctx context.Context, _ *lock.Lease) error {
		r.net.delay(0, time.Hour) // every reply from now on is held back
		<-ctx.Done()
		lostAt = time.Now()
		return nil
	})
	took := time.Since(lostAt)
	r.net.delay(0, 0)
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Do with the replies held back: %v; want ErrLost", err)
	}
	// Not a speed check: unbounded, the renewal in flight (sent at most one
	// TTL, 600 ms, before the loss) waits for go-redis's ReadTimeout, so Do
	// returns at least 4.4 s after the loss; bounded, about one TTL (the
	// release's own bound).
	if took >= readTimeout/2 {
		t.Fatalf("Do returned %v after the lease was lost; the renewal or the release outlived the lease", took)
	}
	t.Logf("Do returned %v after the lease was lost: %v", took.Round(time.Millisecond), err)
}
