package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// The fault tests each start a cluster of their own (etcdtest.New), since
// they stop, restart and partition its members.

// settle bounds how long a test waits for the cluster to heal: an election
// takes one to two election timeouts, more on a loaded machine.
const settle = 30 * time.Second

// eventually runs op until it succeeds or fails with an error that a retry
// cannot cure, for at most settle.
func eventually(t *testing.T, what string, op func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return
		}
		if !driver.Retryable(err) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, settle, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeaderKilledMidLease: the leader dies while a lease is held. A new
// leader takes over the lessor, so the lease survives (etcd extends every
// lease on promotion, never shortens one) with its token; its holder can
// extend and release it; the next holder's token is higher, and the store
// refuses the old holder.
func TestLeaderKilledMidLease(t *testing.T) {
	c := etcdtest.New(t)
	cl := client(t, c.Endpoints())
	ns := prefix(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	s := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns})
	ctx := testkit.Context(t)
	a, next := testkit.Owner(t), testkit.Owner(t)

	old, err := acquire(ctx, b, "job", a, 20*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if err := s.Put(ctx, "res", old, []byte("a")); err != nil {
		t.Fatalf("Put by the holder: %v", err)
	}
	leader, err := c.Leader(ctx, settle)
	if err != nil {
		t.Fatal(err)
	}
	leader.Stop()

	eventually(t, "Inspect after the leader died", func(ctx context.Context) error {
		info, err := inspect(ctx, b, "job")
		if err == nil && (!info.Held || info.Owner != a || info.Token != old) {
			t.Fatalf("after the leader died, Inspect = %+v; want the lease held by its owner with token %d", info, old)
		}
		return err
	})
	eventually(t, "Extend by the holder", func(ctx context.Context) error { return extend(ctx, b, "job", a, 20*time.Second) })
	if _, err := acquire(ctx, b, "job", next, 20*time.Second); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Acquire by another owner while the surviving lease is held: %v; want lock.ErrHeld", err)
	}
	eventually(t, "Release by the holder", func(ctx context.Context) error { return release(ctx, b, "job", a) })

	var tok fence.Token
	eventually(t, "Acquire by the next holder", func(ctx context.Context) (err error) {
		tok, err = acquire(ctx, b, "job", next, 20*time.Second)
		return err
	})
	if tok <= old {
		t.Fatalf("token after the failover = %d; want above %d", tok, old)
	}
	if err := s.Put(ctx, "res", tok, []byte("next")); err != nil {
		t.Fatalf("Put by the next holder: %v", err)
	}
	if err := s.Put(ctx, "res", old, []byte("stale")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Put with the old holder's token: %v; want fence.ErrStale", err)
	}

	// The dead member comes back and catches up: it serves the same state.
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	back := fenceetcd.NewBackend(client(t, []string{leader.ClientURL}), &fenceetcd.BackendOptions{Prefix: ns})
	eventually(t, "Inspect on the restarted member", func(ctx context.Context) error {
		info, err := inspect(ctx, back, "job")
		if err == nil && (info.Owner != next || info.Token != tok) {
			t.Fatalf("the restarted member reports %+v; want held by the next holder with token %d", info, tok)
		}
		return err
	})
}

// TestPartitionedLeaderCannotAcquire cuts the leader off from the other two
// members (inside their Raft transports, both ways) while its clients still
// reach it. The majority elects a new leader and grants the lock; a client
// of the minority side can take nothing, not even a free lock, nor renew a
// lease, so there is never a second holder. After the partition heals, the
// old leader serves the majority's state.
func TestPartitionedLeaderCannotAcquire(t *testing.T) {
	c := etcdtest.New(t)
	ctx := testkit.Context(t)
	ns := prefix(t)
	leader, err := c.Leader(ctx, settle)
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, m := range c.Members {
		if m != leader {
			rest = append(rest, m.ClientURL)
		}
	}
	minority := fenceetcd.NewBackend(client(t, []string{leader.ClientURL}), &fenceetcd.BackendOptions{Prefix: ns})
	majority := fenceetcd.NewBackend(client(t, rest), &fenceetcd.BackendOptions{Prefix: ns})
	a, b, other := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)

	before, err := acquire(ctx, minority, "held", a, 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire before the partition: %v", err)
	}
	if err := c.Isolate(leader); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Heal(leader) })

	var tok fence.Token
	eventually(t, "Acquire of a free lock on the majority side", func(ctx context.Context) (err error) {
		tok, err = acquire(ctx, majority, "free", b, 30*time.Second)
		return err
	})
	if tok <= before {
		t.Fatalf("majority token %d; want above %d, minted before the partition", tok, before)
	}

	try := func(what string, op func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := op(ctx)
		if err == nil {
			t.Fatalf("%s on the minority side succeeded; want an error", what)
		}
		if !driver.Retryable(err) {
			t.Fatalf("%s on the minority side: %v; want an error that lock.Client retries", what, err)
		}
	}
	try("Acquire of the lock the majority holds", func(ctx context.Context) error {
		_, err := acquire(ctx, minority, "free", other, 30*time.Second)
		return err
	})
	try("Acquire of a free lock", func(ctx context.Context) error {
		_, err := acquire(ctx, minority, "never", other, 30*time.Second)
		return err
	})
	try("Inspect (a linearizable read)", func(ctx context.Context) error {
		_, err := inspect(ctx, minority, "free")
		return err
	})

	if err := c.Heal(leader); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Inspect on the old leader after the partition healed", func(ctx context.Context) error {
		info, err := inspect(ctx, minority, "free")
		if err == nil && (info.Owner != b || info.Token != tok) {
			t.Fatalf("after healing, the old leader reports %+v; want held by the majority's holder with token %d", info, tok)
		}
		return err
	})
	info, err := inspect(ctx, majority, "never")
	if err != nil {
		t.Fatal(err)
	}
	if info.Held && info.Owner != other {
		t.Fatalf("a lock nobody took is held: %+v", info)
	}
}

// TestWholeClusterRestartKeepsTokensRising stops every member and starts
// them again from their data directories: leases, fences and the revision
// counter are all in the Raft log and the backend database, so the next
// token is above every earlier one and old tokens stay refused.
func TestWholeClusterRestartKeepsTokensRising(t *testing.T) {
	c := etcdtest.New(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	cl := client(t, c.Endpoints())
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	s := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns})

	var highest fence.Token
	for _, name := range []string{"a", "b", "c"} {
		o := testkit.Owner(t)
		tok, err := acquire(ctx, b, name, o, 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire(%q): %v", name, err)
		}
		if err := s.Put(ctx, "res", tok, []byte(name)); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if name != "c" {
			if err := release(ctx, b, name, o); err != nil {
				t.Fatalf("Release(%q): %v", name, err)
			}
		}
		highest = max(highest, tok)
	}
	c.Close()
	if err := c.Restart(c.Members...); err != nil {
		t.Fatal(err)
	}
	cl = client(t, c.Endpoints())
	b = fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	s = fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns})

	var tok fence.Token
	eventually(t, "Acquire after the restart", func(ctx context.Context) (err error) {
		tok, err = acquire(ctx, b, "a", testkit.Owner(t), 10*time.Second)
		return err
	})
	if tok <= highest {
		t.Fatalf("token after the restart = %d; want above %d, the highest before it", tok, highest)
	}
	rec, err := s.Get(ctx, "res")
	if err != nil || rec.Fence != highest || string(rec.Value) != "c" {
		t.Fatalf("Get after the restart = %+v, %v; want value c with fence %d", rec, err, highest)
	}
	if err := s.Put(ctx, "res", highest-1, []byte("old")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Put with an older token after the restart: %v; want fence.ErrStale", err)
	}
	if err := s.Put(ctx, "res", tok, []byte("new")); err != nil {
		t.Fatalf("Put with the new token: %v", err)
	}
}
