package failover

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestPartitionNetnsCutClientLosesLeaseAndIsFenced cuts a lock holder from
// its Redis at the IP layer: the holder's client dials from a network
// namespace of the test's own (testkit.Netns, veth pair, 10.231.x.y), and
// the namespace's link goes down, so its packets are dropped, not refused.
//   - the holder's calls time out (silence, no reset);
//   - its keep-alive cannot renew, and the lease is reported lost (Done)
//     by its local deadline;
//   - a client on the host takes the lock once the server expires the
//     lease, with a higher token, and writes;
//   - when the link comes back, the old holder's write with its token is
//     refused as stale, and the value is the new holder's.
func TestPartitionNetnsCutClientLosesLeaseAndIsFenced(t *testing.T) {
	ctx := testkit.Context(t)
	ns := testkit.NewNetns(t)
	// Protected mode would refuse the namespace, which is not loopback; the
	// server listens only on loopback and the test's own veth address.
	srv := testkit.NewRedisServer(t, "--bind", "127.0.0.1", ns.HostIP, "--protected-mode", "no")
	nsAddr := net.JoinHostPort(ns.HostIP, portOf(t, srv.Addr()))
	cut := goredis.NewClient(&goredis.Options{Addr: nsAddr, Dialer: ns.DialContext})
	t.Cleanup(func() { _ = cut.Close() })
	host := srv.Client(t)
	prefix := testkit.Namespace(t)
	cutBackend := fenceredis.NewBackend(cut, &fenceredis.BackendOptions{Prefix: prefix})
	cutStore := fenceredis.NewStore(cut, &fenceredis.StoreOptions{Prefix: prefix})
	hostBackend := fenceredis.NewBackend(host, &fenceredis.BackendOptions{Prefix: prefix})
	hostStore := fenceredis.NewStore(host, &fenceredis.StoreOptions{Prefix: prefix})

	ttl := time.Second
	lease, err := lock.New(cutBackend, nil).Acquire(ctx, "job", ttl, lock.WithKeepAlive(true))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	old := lease.Token()
	require.NoError(t, cutStore.Put(ctx, "resource", old, []byte("before the cut")))

	ns.Cut()
	cutAt := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = inspect(cctx, cutBackend, "job")
	cancel()
	require.Error(t, err, "a call across the cut")
	require.True(t, errors.Is(err, context.DeadlineExceeded) || isTimeout(err),
		"a call across the cut must time out (silence), not be refused: %v", err)

	select {
	case <-lease.Done():
		t.Logf("lease reported lost %v after the cut: %v", time.Since(cutAt).Round(time.Millisecond), lease.Err())
	case <-time.After(5 * ttl):
		t.Fatalf("the cut-off holder's lease was not reported lost within %v", 5*ttl)
	}

	next := acquireWhenFree(t, ctx, hostBackend, "job", testkit.Owner(t), 10*time.Second)
	require.Greater(t, next, old)
	require.NoError(t, hostStore.Put(ctx, "resource", next, []byte("new holder")))

	ns.Heal()
	err, _ = retry(ctx, 15*time.Second, func(c context.Context) error {
		return cutStore.Put(c, "resource", old, []byte("old holder after the cut"))
	})
	require.ErrorIs(t, err, fence.ErrStale, "the old holder's write after the link came back")
	rec, err := hostStore.Get(ctx, "resource")
	require.NoError(t, err)
	require.Equal(t, "new holder", string(rec.Value))
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return port
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// acquireWhenFree polls Acquire until the lock is free (the server expired
// the holder's lease) or within has passed.
func acquireWhenFree(t *testing.T, ctx context.Context, b driver.Backend, name, owner string, within time.Duration) fence.Token {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		tok, err := acquire(ctx, b, name, owner, time.Minute)
		if err == nil {
			return tok
		}
		if !errors.Is(err, lock.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("acquire %s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval until the lease expires
	}
}
