package failover

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestClusterFailoverPromotesReplicaKeepsOtherSlotsAndTokens runs a Redis
// Cluster of three masters with one replica each, takes a lease on a lock in
// every master's slots, and kills the first master; the cluster promotes its
// replica. go-redis's ClusterClient (default options) is used throughout.
//   - the locks on the other masters' slots keep their owner and token;
//   - on the failed slot a new token is above every earlier one;
//   - fenced writes on every slot go on, and a pre-failover token is refused
//     on the failed slot once a newer one wrote there;
//   - no MOVED, ASK or CROSSSLOT error reaches the caller at any point:
//     while the master is down calls fail with connection or CLUSTERDOWN
//     errors, which lock.Client retries;
//   - nobody reloads the client's slot map by hand: the adapter asks for a
//     reload after a connection error, and calls on the failed slot reach
//     the promoted master within 15 s of the promotion;
//   - a Release and a Put that failed on the dead master were sent once:
//     after the promotion the lease is still held with its token and the
//     record was never written.
func TestClusterFailoverPromotesReplicaKeepsOtherSlotsAndTokens(t *testing.T) {
	ctx := testkit.Context(t)
	c := testkit.NewRedisCluster(t, 3)
	for i := range c.Nodes {
		c.AddReplica(t, i)
	}
	// Detect a dead master after 1 s instead of the 5 s testkit starts with.
	for _, n := range append(append([]*testkit.RedisServer{}, c.Nodes...), c.Replicas...) {
		if _, err := n.Do("CONFIG", "SET", "cluster-node-timeout", "1000"); err != nil {
			t.Fatalf("CONFIG SET cluster-node-timeout on %s: %v", n.Addr(), err)
		}
	}
	client := c.Client(t)
	prefix := testkit.Namespace(t)
	b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix})
	s := fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: prefix})

	// One lock name per master: the master that owns the slot of its keys;
	// spare is one more name on the first master, for a write sent while it
	// is down.
	names := make([]string, len(c.Nodes))
	spare := ""
	for i, found := 0, 0; found < len(c.Nodes) || spare == ""; i++ {
		name := "job-" + strconv.Itoa(i)
		slotText, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", b.LeaseKey(name))
		require.NoError(t, err)
		slot, _ := strconv.Atoi(slotText)
		m := len(c.Nodes) - 1 // testkit gives master m the slots from m*16384/n on
		for slot < m*16384/len(c.Nodes) {
			m--
		}
		switch {
		case names[m] == "":
			names[m] = name
			found++
		case m == 0 && spare == "":
			spare = name
		}
	}
	owners := make([]string, len(names))
	tokens := make([]fence.Token, len(names))
	for i, name := range names {
		owners[i] = testkit.Owner(t)
		tokens[i] = mustAcquire(t, ctx, b, name, owners[i], time.Minute)
		require.NoError(t, s.Put(ctx, name, tokens[i], []byte("before")))
	}
	c.Nodes[0].WaitReplicas(1) // the lease on the failed slot reached the replica

	// Calls on every lock while the master dies and the replica takes over.
	var (
		mu     sync.Mutex
		errs   []error
		calls  int
		stopCh = make(chan struct{})
		wg     sync.WaitGroup
	)
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopCh:
					return
				case <-time.After(20 * time.Millisecond): // call rate during the failover
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := inspect(cctx, b, name)
				if err == nil {
					err = s.Put(cctx, name, tokens[i], []byte("during"))
				}
				cancel()
				mu.Lock()
				calls++
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}

	c.Nodes[0].Kill()
	start := time.Now()

	// Sent once each while the slot's master is dead: they fail, and must
	// not be sent again once the client has found the new master.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := release(cctx, b, names[0], owners[0])
	cancel()
	require.Error(t, err, "release on the dead master")
	require.NotErrorIs(t, err, lock.ErrNotHeld, "release on the dead master")
	cctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	err = s.Put(cctx, spare, tokens[0], []byte("sent once"))
	cancel()
	require.Error(t, err, "put on the dead master")
	t.Logf("release and put on the dead master failed: %v", err)

	promoted := c.Replicas[0]
	err, _ = retry(ctx, 30*time.Second, func(context.Context) error {
		info, err := promoted.Do("CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") || promoted.Info("replication", "role") != "master" {
			return errNotYet
		}
		return nil
	})
	require.NoError(t, err, "the replica of the killed master was not promoted")
	t.Logf("cluster promoted %s %v after the kill", promoted.Addr(), time.Since(start))

	// The client finds the new master by itself, with default go-redis
	// options and no ReloadState call: the failing calls above and below
	// make the adapter ask for a slot-map reload.
	promotedAt := time.Now()
	err, seen := retry(ctx, 15*time.Second, func(c context.Context) error { _, err := inspect(c, b, names[0]); return err })
	require.NoError(t, err, "calls on the failed slot did not reach the promoted master within 15 s")
	t.Logf("calls on the failed slot reached the promoted master %v after the promotion (%d failed first)", time.Since(promotedAt), len(seen))

	// The Release and the Put sent while the master was dead were not sent
	// again: the lease is still the old owner's, the spare record unwritten.
	info, err := inspect(ctx, b, names[0])
	require.NoError(t, err)
	require.True(t, info.Held && info.Owner == owners[0] && info.Token == tokens[0],
		"lease on the failed slot after the promotion: %+v, want owner %s token %d", info, owners[0], tokens[0])
	_, err = s.Get(ctx, spare)
	require.ErrorIs(t, err, fence.ErrNotFound, "the put sent while the master was dead")

	newOwner := testkit.Owner(t)
	require.NoError(t, release(ctx, b, names[0], owners[0]), "release on the failed slot after the promotion")
	newTok := mustAcquire(t, ctx, b, names[0], newOwner, time.Minute)
	close(stopCh)
	wg.Wait()

	t.Logf("failed slot: token before %d, after %d; %d calls during the failover, %d failed", tokens[0], newTok, calls, len(errs))
	require.Greater(t, newTok, tokens[0], "token on the failed slot after the promotion")
	kinds := map[string]int{}
	for _, err := range errs {
		msg := err.Error()
		kinds[strings.SplitN(msg, ": ", 3)[len(strings.SplitN(msg, ": ", 3))-1]]++
		for _, bad := range []string{"MOVED", "ASK ", "CROSSSLOT"} {
			if strings.Contains(msg, bad) {
				t.Errorf("a %s error reached the caller: %v", bad, err)
			}
		}
	}
	t.Logf("errors the callers saw during the failover: %v", kinds)
	for i := 1; i < len(names); i++ {
		info, err := inspect(ctx, b, names[i])
		require.NoError(t, err)
		require.True(t, info.Held && info.Owner == owners[i] && info.Token == tokens[i],
			"lock %s on a master that did not fail: %+v, want owner %s token %d", names[i], info, owners[i], tokens[i])
		rec, err := s.Get(ctx, names[i])
		require.NoError(t, err)
		require.Equal(t, tokens[i], rec.Fence)
	}
	require.NoError(t, s.Put(ctx, names[0], newTok, []byte("after")))
	require.ErrorIs(t, s.Put(ctx, names[0], tokens[0], []byte("stale")), fence.ErrStale)
}
