package failover

import (
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestSentinelFailoverTokensRiseAndWaitedLeaseSurvives kills the primary of
// a Sentinel-watched pair; the Sentinels promote the replica and go-redis's
// failover client (default options) follows it. Across the promotion:
//   - tokens keep rising: a lock taken after the failover gets a token above
//     every token issued before it;
//   - the holder from before the failover, now stale, is refused by a fenced
//     store on a server that did not fail over;
//   - a lease acquired with BackendOptions.WaitReplicas is on the promoted
//     replica: same owner and token, another owner is refused, the holder
//     extends it.
func TestSentinelFailoverTokensRiseAndWaitedLeaseSurvives(t *testing.T) {
	ctx := testkit.Context(t)
	g := testkit.NewRedisSentinelGroup(t)
	client := g.FailoverClient(t)
	prefix := testkit.Namespace(t)
	plain := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix})
	waited := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 2 * time.Second})

	// The fenced resource lives on its own server, which does not fail over.
	storeServer := testkit.NewRedisServer(t)
	store := fenceredis.NewStore(storeServer.Client(t), &fenceredis.StoreOptions{Prefix: prefix})

	// Before: an old holder writes, and its lease is released; a second
	// lease is taken with a replication wait and kept across the failover.
	oldOwner, keeper := testkit.Owner(t), testkit.Owner(t)
	oldTok := mustAcquire(t, ctx, plain, "job", oldOwner, 10*time.Second)
	require.NoError(t, store.Put(ctx, "resource", oldTok, []byte("old")))
	require.NoError(t, release(ctx, plain, "job", oldOwner))
	keptTok := mustAcquire(t, ctx, waited, "kept", keeper, 30*time.Second)

	g.Primary.Kill()
	took := g.WaitPromoted(t)
	t.Logf("Sentinel promoted %s %v after the kill", g.Replica.Addr(), took)

	// After: the failover client reaches the new primary; a new holder's
	// token is above the old one.
	newOwner := testkit.Owner(t)
	newTok := mustAcquire(t, ctx, plain, "job", newOwner, 10*time.Second)
	t.Logf("token before the failover %d, after %d", oldTok, newTok)
	require.Greater(t, newTok, oldTok, "a token minted after the promotion")
	require.Greater(t, newTok, keptTok, "a token minted after the promotion")
	require.NoError(t, store.Put(ctx, "resource", newTok, []byte("new")))
	err := store.Put(ctx, "resource", oldTok, []byte("stale"))
	require.ErrorIs(t, err, fence.ErrStale, "the pre-failover holder's write must be refused as stale, got %v", err)
	rec, err := store.Get(ctx, "resource")
	require.NoError(t, err)
	require.Equal(t, "new", string(rec.Value))

	// The lease acquired with WaitReplicas survived the promotion.
	info, err := inspect(ctx, waited, "kept")
	require.NoError(t, err)
	require.True(t, info.Held && info.Owner == keeper && info.Token == keptTok,
		"lease after the failover: %+v, want owner %s token %d", info, keeper, keptTok)
	_, err = acquire(ctx, waited, "kept", testkit.Owner(t), time.Second)
	require.ErrorIs(t, err, lock.ErrHeld, "another owner must be refused, got %v", err)
	require.NoError(t, extend(ctx, plain, "kept", keeper, 30*time.Second))
}
