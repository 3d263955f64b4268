package redis_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestQueueRoundTrips: with queued waiting, an uncontended Client.Acquire
// and Release are still one round trip each (EVALSHA), no subscription is
// made, and nothing of the queue is left behind; a waiter's enqueue is one
// round trip too.
func TestQueueRoundTrips(t *testing.T) {
	t.Parallel()
	shared := testkit.Redis(t)
	c, rt := counted(t, shared.Options().Addr)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, shared)})
	client := lock.New(b, nil)

	warm, err := client.Acquire(ctx, "warm", time.Minute) // caches the scripts
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	rt.take()

	l, err := client.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	n, sent := rt.take()
	require.Equal(t, 1, n, "uncontended Acquire: %v", sent)
	require.Equal(t, []string{"evalsha"}, sent)

	waiter := newOwner(t)
	_, err = enqueue(ctx, b, "job", waiter, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	n, sent = rt.take()
	require.Equal(t, 1, n, "enqueue: %v", sent)
	require.NoError(t, leave(ctx, b, "job", waiter))
	rt.take()

	require.NoError(t, l.Release(ctx))
	n, sent = rt.take()
	require.Equal(t, 1, n, "Release: %v", sent)
	require.Equal(t, []string{"evalsha"}, sent)

	subs, err := shared.PubSubNumSub(ctx, b.WakeChannel()).Result()
	require.NoError(t, err)
	require.Zero(t, subs[b.WakeChannel()], "subscribers of the wake-up channel with nobody waiting")
	for _, k := range []string{b.QueueKey("job"), b.PlacesKey("job"), b.QueuedKey("job"), b.QueueKey("warm"), b.PlacesKey("warm"), b.QueuedKey("warm")} {
		require.Zero(t, shared.Exists(ctx, k).Val(), "%s left behind", k)
	}
}

// TestQueueKeysShareHashTag: every key and the channel of one lock share
// its hash tag, so the scripts run on Redis Cluster.
func TestQueueKeysShareHashTag(t *testing.T) {
	b := fenceredis.NewBackend(testkit.Redis(t), nil)
	name := "a}{b%"
	want := "{" + strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(name) + "}"
	for _, k := range []string{b.LeaseKey(name), b.CounterKey(name), b.QueueKey(name), b.PlacesKey(name), b.QueuedKey(name)} {
		i := strings.IndexByte(k, '{')
		j := strings.IndexByte(k[i:], '}')
		require.Equal(t, want, k[i:i+j+1], "hash tag of %s", k)
	}
}

// TestQueuePlacesExpireOnTheServer: a waiter that stops renewing loses its
// place on the server's clock, and the queue's keys go with the last place,
// so dead waiters leave nothing behind.
func TestQueuePlacesExpireOnTheServer(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	holder := newOwner(t)
	_, err := acquire(ctx, b, "l", holder, time.Minute)
	require.NoError(t, err)
	_, err = enqueue(ctx, b, "l", newOwner(t), time.Minute, 50*time.Millisecond) // then dies
	require.ErrorIs(t, err, lock.ErrHeld)
	eventually(t, 5*time.Second, "the dead waiter's keys expiring", func() bool {
		return c.Exists(ctx, b.QueueKey("l"), b.PlacesKey("l"), b.QueuedKey("l")).Val() == 0
	})
	// The next waiter is first in line: it is told the holder's TTL.
	_, err = enqueue(ctx, b, "l", newOwner(t), time.Minute, time.Minute)
	var he *driver.HeldError
	require.True(t, errors.As(err, &he), "%v", err)
	require.Positive(t, he.TTL)
}

// TestInspectCountsLivePlaces: Inspect of a lock reports the live places in
// its line, whether the lock is held or free, read by the script that reads
// the holder; a place whose expiry has passed on the server's clock is not
// counted, though it stays in the places set until an acquire drops it.
func TestInspectCountsLivePlaces(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	holder, long, short := newOwner(t), newOwner(t), newOwner(t)
	tok, err := acquire(ctx, b, "l", holder, time.Minute)
	require.NoError(t, err)
	info, err := inspect(ctx, b, "l")
	require.NoError(t, err)
	require.Equal(t, lockInfo{Held: true, Holder: driver.Holder{Owner: holder, Kind: driver.Exclusive, Token: tok, TTL: info.TTL}}, info)

	_, err = enqueue(ctx, b, "l", long, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	_, err = enqueue(ctx, b, "l", short, time.Minute, 50*time.Millisecond) // then dies
	require.ErrorIs(t, err, lock.ErrHeld)
	_, err = enqueue(ctx, b, "l", long, time.Minute, time.Minute) // renewed: still one place
	require.ErrorIs(t, err, lock.ErrHeld)
	info, err = inspect(ctx, b, "l")
	require.NoError(t, err)
	require.Equal(t, 2, info.Waiting, "two places, one of them renewed")
	eventually(t, 5*time.Second, "the short place expiring", func() bool {
		info, err := inspect(ctx, b, "l")
		require.NoError(t, err)
		return info.Waiting == 1
	})
	require.Equal(t, int64(2), c.ZCard(ctx, b.PlacesKey("l")).Val(), "the expired place is still in the set")
	info, err = inspect(ctx, b, "l")
	require.NoError(t, err)
	require.True(t, info.Held && info.Owner == holder && info.Token == tok, "%+v", info)

	require.NoError(t, release(ctx, b, "l", holder))
	info, err = inspect(ctx, b, "l")
	require.NoError(t, err)
	require.Equal(t, lockInfo{Waiting: 1}, info, "a free lock with a waiter")
	require.NoError(t, leave(ctx, b, "l", long))
	require.NoError(t, leave(ctx, b, "l", short))
	info, err = inspect(ctx, b, "l")
	require.NoError(t, err)
	require.Equal(t, lockInfo{}, info)
}

// processOnly hides every method of a go-redis client but Process: a Client
// that cannot subscribe.
type processOnly struct{ fenceredis.Client }

// TestQueueWithoutPubSub: over a Client that cannot subscribe, waiters
// still queue in order and are served at their renewals (Await waits its
// max).
func TestQueueWithoutPubSub(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(processOnly{c}, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	holder := newOwner(t)
	_, err := acquire(ctx, b, "l", holder, time.Minute)
	require.NoError(t, err)
	waiter := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 150 * time.Millisecond}})
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "l", time.Minute)
		if err == nil {
			err = l.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the waiter queueing", func() bool {
		return c.Exists(ctx, b.QueueKey("l")).Val() == 1
	})
	require.NoError(t, release(ctx, b, "l", holder))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not served at its renewal")
	}
}

// TestQueueWakesAcrossBackends: waiters in different processes (each its
// own Backend, client and wake-up channel) are served in arrival order, each
// woken by the previous holder's release in another process, well before
// their renewal (every 10 s).
func TestQueueWakesAcrossBackends(t *testing.T) {
	t.Parallel()
	shared := testkit.Redis(t)
	ctx := testCtx(t)
	prefix := testkit.RedisPrefix(t, shared)
	newBackend := func() *fenceredis.Backend {
		c := goredis.NewClient(shared.Options())
		t.Cleanup(func() { _ = c.Close() })
		return fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})
	}
	holderB := newBackend()
	holder := newOwner(t)
	_, err := acquire(ctx, holderB, "l", holder, time.Minute)
	require.NoError(t, err)
	const n = 3
	served := make(chan int, n)
	for i := range n {
		b := newBackend()
		require.NotEqual(t, holderB.WakeChannel(), b.WakeChannel())
		queued := make(chan struct{})
		var once atomic.Bool
		c := lock.New(b, &lock.Options{
			Queue: lock.QueueOptions{PlaceTTL: 30 * time.Second},
			Observer: &lock.Observer{Retrying: func(lock.Event) {
				if once.CompareAndSwap(false, true) {
					close(queued)
				}
			}},
		})
		go func() {
			l, err := c.Acquire(ctx, "l", time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			served <- i
			_ = l.Release(context.WithoutCancel(ctx))
		}()
		select {
		case <-queued:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter never queued")
		}
	}
	require.NoError(t, release(ctx, holderB, "l", holder))
	for want := range n {
		select {
		case got := <-served:
			require.Equal(t, want, got, "order of service")
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d not served within 5s: not woken", want)
		}
	}
}

// TestQueueFlagLivesAsLongAsThePlaces: the flag that makes a release wake
// the first waiter lives as long as the longest place in line, so a waiter
// with a short place TTL queueing behind one with a long place does not cut
// the long one's wake-up short; the release deletes it and wakes the first.
func TestQueueFlagLivesAsLongAsThePlaces(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	holder, long, short := newOwner(t), newOwner(t), newOwner(t)
	_, err := acquire(ctx, b, "l", holder, time.Minute)
	require.NoError(t, err)
	_, err = enqueue(ctx, b, "l", long, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	_, err = enqueue(ctx, b, "l", short, time.Minute, 100*time.Millisecond)
	require.ErrorIs(t, err, lock.ErrHeld)
	ttl, err := c.PTTL(ctx, b.QueuedKey("l")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 30*time.Second, "the flag's TTL after a short place queued behind a long one")
	require.NoError(t, release(ctx, b, "l", holder))
	require.Zero(t, c.Exists(ctx, b.QueuedKey("l")).Val(), "the flag after the release")
	require.NoError(t, leave(ctx, b, "l", long))
	require.NoError(t, leave(ctx, b, "l", short))
}

// TestQueueLastWaiterTakesTheFlag: a waiter admitted when its holder's
// lease ran out (no release to delete the flag) and nobody else waits
// leaves neither the flag nor the queue behind.
func TestQueueLastWaiterTakesTheFlag(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	waiter := newOwner(t)
	_, err := acquire(ctx, b, "l", newOwner(t), 50*time.Millisecond) // then dies
	require.NoError(t, err)
	_, err = enqueue(ctx, b, "l", waiter, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.Equal(t, int64(1), c.Exists(ctx, b.QueuedKey("l")).Val(), "the flag while the waiter waits")
	eventually(t, 5*time.Second, "the waiter admitted after the lease ran out", func() bool {
		_, err := enqueue(ctx, b, "l", waiter, time.Minute, time.Minute)
		return err == nil
	})
	require.Zero(t, c.Exists(ctx, b.QueuedKey("l"), b.QueueKey("l"), b.PlacesKey("l")).Val(), "queue keys after the last waiter was admitted")
	require.NoError(t, release(ctx, b, "l", waiter))
}
