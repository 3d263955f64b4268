package failover

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// Timing of TestSentinelFailoverWithWaitersQueued. A waiter renews its
// place every third of waiterPlace (20 s), so a waiter served within
// wokenWithin (4 s, five times less) was woken by pub/sub, not by its
// renewal.
const (
	waiterPlace = time.Minute
	wokenWithin = 4 * time.Second
	crashLease  = 3 * time.Second // the lease of a holder that dies with the primary
)

// served is a waiter's acquisition: its token, when it got the lock, and
// the lease (to release it).
type served struct {
	who   string
	token fence.Token
	at    time.Time
	lease *lock.Lease
	err   error
}

// queueWaiter starts a blocking lock.Client.Acquire of name by a client of
// its own (its own failover client, Backend and pub/sub connection, as a
// separate process would have), and returns where its acquisition is
// reported.
func queueWaiter(t *testing.T, ctx context.Context, g *testkit.RedisSentinelGroup, prefix, name, who string) (*fenceredis.Backend, <-chan served) {
	b := fenceredis.NewBackend(g.FailoverClient(t), &fenceredis.BackendOptions{Prefix: prefix})
	c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: waiterPlace}, MaxUnreachable: -1})
	out := make(chan served, 1)
	go func() {
		l, err := c.Acquire(ctx, name, time.Minute)
		s := served{who: who, at: time.Now(), lease: l, err: err}
		if err == nil {
			s.token = l.Token()
		}
		out <- s
	}()
	return b, out
}

// waitQueued polls the primary until name's queue holds n waiters.
func waitQueued(t *testing.T, ctx context.Context, primary *goredis.Client, b *fenceredis.Backend, name string, n int64) {
	t.Helper()
	err, _ := retry(ctx, 20*time.Second, func(c context.Context) error {
		if got, err := primary.ZCard(c, b.QueueKey(name)).Result(); err != nil || got != n {
			return errNotYet
		}
		return nil
	})
	require.NoError(t, err, "%d waiters in line for %s on the primary", n, name)
}

// receive waits for a waiter's acquisition, at most d.
func receive(t *testing.T, ch <-chan served, d time.Duration, what string) served {
	t.Helper()
	select {
	case s := <-ch:
		require.NoError(t, s.err, what)
		return s
	case <-time.After(d):
		t.Fatalf("%s: not served within %v", what, d)
	}
	return served{}
}

// TestSentinelFailoverWithWaitersQueued kills the primary of a
// Sentinel-watched pair while waiters are in line for two locks, after
// the replica has every write (a WAIT on the primary: the queue is then on
// the replica; what a failover that loses the queue costs is a waiter's
// renewal, TestQueueSurvivesServerRestart in adapters/redis). After the
// Sentinels promote the replica:
//   - every waiter's wake-up connection is subscribed on the new primary
//     (PUBSUB NUMSUB there): go-redis's failover client re-dials the
//     promoted replica and resubscribes the Backend's channel;
//   - "held": the holder from before the failover releases on the new
//     primary, and its two waiters get the lock one after the other, in the
//     order they queued, each within wokenWithin of the release before it
//     (a fifth of their renewal interval: woken by pub/sub on the new
//     primary);
//   - "crashed": a holder that never releases (it died with the primary)
//     is followed by its waiter once its lease has run out, within its
//     lease TTL plus the failover;
//   - every token handed out after the failover is above every token
//     handed out before it (none repeats), and rises along the line.
func TestSentinelFailoverWithWaitersQueued(t *testing.T) {
	ctx := testkit.Context(t)
	g := testkit.NewRedisSentinelGroup(t)
	prefix := testkit.Namespace(t)
	holders := fenceredis.NewBackend(g.FailoverClient(t), &fenceredis.BackendOptions{Prefix: prefix})
	primary := g.Primary.Client(t)

	// Before: tokens minted and released, then a holder per lock.
	var before []fence.Token
	for _, name := range []string{"held", "crashed"} {
		o := testkit.Owner(t)
		before = append(before, mustAcquire(t, ctx, holders, name, o, 10*time.Second))
		require.NoError(t, release(ctx, holders, name, o))
	}
	holder, doomed := testkit.Owner(t), testkit.Owner(t)
	before = append(before, mustAcquire(t, ctx, holders, "held", holder, time.Minute))
	before = append(before, mustAcquire(t, ctx, holders, "crashed", doomed, crashLease))

	// Two waiters behind the holder of "held", in this order; one behind
	// the doomed holder of "crashed".
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	first, firstServed := queueWaiter(t, wctx, g, prefix, "held", "first")
	waitQueued(t, ctx, primary, holders, "held", 1)
	second, secondServed := queueWaiter(t, wctx, g, prefix, "held", "second")
	waitQueued(t, ctx, primary, holders, "held", 2)
	after, afterServed := queueWaiter(t, wctx, g, prefix, "crashed", "after the crash")
	waitQueued(t, ctx, primary, holders, "crashed", 1)

	// The replica has everything: a write on this connection, then WAIT,
	// which counts the replicas that have that write and all before it.
	require.NoError(t, primary.Set(ctx, prefix+":sync", "1", time.Minute).Err())
	acked, err := primary.Do(ctx, "WAIT", 1, 5000).Int64()
	require.NoError(t, err)
	require.Equal(t, int64(1), acked, "replicas that have the queue before the kill")

	g.Primary.Kill()
	killed := time.Now()
	took := g.WaitPromoted(t)
	t.Logf("Sentinel promoted %s %v after the kill", g.Replica.Addr(), took)

	// The waiters' pub/sub connections follow the promotion.
	promoted := g.Replica.Client(t)
	for _, b := range []*fenceredis.Backend{first, second, after} {
		ch := b.WakeChannel()
		err, _ := retry(ctx, 30*time.Second, func(c context.Context) error {
			if n, err := promoted.PubSubNumSub(c, ch).Result(); err != nil || n[ch] < 1 {
				return errNotYet
			}
			return nil
		})
		require.NoError(t, err, "the wake-up channel %s subscribed on the promoted replica", ch)
	}
	t.Logf("every waiter's wake-up channel subscribed on the new primary %v after the kill", time.Since(killed))
	require.Equal(t, int64(2), promoted.ZCard(ctx, holders.QueueKey("held")).Val(), "waiters of held in line on the new primary")

	// "held": the holder releases on the new primary; the line moves on.
	err, seen := retry(ctx, 20*time.Second, func(c context.Context) error { return release(c, holders, "held", holder) })
	require.NoError(t, err, "release on the new primary (after %d failed attempts)", len(seen))
	released := time.Now()
	got1 := receive(t, firstServed, wokenWithin, "the first waiter after the release")
	select {
	case s := <-secondServed:
		t.Fatalf("the second waiter was served before the first released: %+v", s)
	default:
	}
	t.Logf("first waiter served %v after the release, token %d", got1.at.Sub(released), got1.token)
	require.NoError(t, got1.lease.Release(ctx))
	released = time.Now()
	got2 := receive(t, secondServed, wokenWithin, "the second waiter after the first released")
	t.Logf("second waiter served %v after the first released, token %d", got2.at.Sub(released), got2.token)
	require.NoError(t, got2.lease.Release(ctx))

	// "crashed": the doomed holder never releases; its lease runs out.
	got3 := receive(t, afterServed, crashLease+30*time.Second, "the waiter behind a holder that died with the primary")
	t.Logf("waiter behind the dead holder served %v after the kill, token %d", got3.at.Sub(killed), got3.token)
	require.NoError(t, got3.lease.Release(ctx))

	// Tokens: none after the failover repeats or falls below one before.
	for _, tok := range []fence.Token{got1.token, got2.token, got3.token} {
		for _, old := range before {
			require.Greater(t, tok, old, "a token handed out after the failover against one from before")
		}
	}
	require.Greater(t, got2.token, got1.token, "tokens along the line")
	t.Logf("tokens before the failover %v; after: %d, %d, %d", before, got1.token, got2.token, got3.token)
}
