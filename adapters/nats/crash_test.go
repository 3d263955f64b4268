package nats_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// streamLeader returns the name of the bucket stream's leader, polling
// until one is elected.
func streamLeader(t *testing.T, js jetstream.JetStream, bucket string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, "KV_"+bucket)
		cancel()
		if err == nil {
			if ci := s.CachedInfo().Cluster; ci != nil && ci.Leader != "" {
				return ci.Leader
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader for the bucket's stream within 30s (last error %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workloadTTL is the TTL of lockWorkload's leases: an acquisition whose
// reply was lost holds the lock that long.
const workloadTTL = 3 * time.Second

// lockWorkload acquires and releases name in a loop, each time with a new
// owner, until stop is closed, retrying transient failures. It fails t if a
// token is not above every token acknowledged before, and returns the
// largest acknowledged token and the number of acquisitions.
func lockWorkload(t *testing.T, b direct, name string, stop <-chan struct{}, progress *atomic.Int64) (fence.Token, int) {
	var maxTok fence.Token
	n := 0
	for {
		select {
		case <-stop:
			return maxTok, n
		default:
		}
		owner, _ := lock.NewOwner()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		tok, err := b.Acquire(ctx, name, owner, workloadTTL)
		if err == nil {
			if tok <= maxTok {
				t.Errorf("token %d after an acknowledged %d: a token was issued again", tok, maxTok)
			}
			maxTok = tok
			n++
			progress.Add(1)
			_ = b.Release(ctx, name, owner)
		}
		cancel()
		if err != nil && !driver.Retryable(err) && !errors.Is(err, lock.ErrHeld) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire: %v", err)
		}
	}
}

// TestLeaderKillDuringWorkload kills (-9) the leader of an R3 bucket's
// stream while a linearizability workload runs on a Store and a lock is
// taken and released in a loop, then restarts it. The Store's history must
// be linearizable (calls cut by the failover count as unknown outcomes),
// and every lock token must be above every token acknowledged before it,
// across the new leader's election.
func TestLeaderKillDuringWorkload(t *testing.T) {
	t.Parallel() // a cluster of its own; mostly waiting for elections
	leaderFaultDuringWorkload(t, "killed", func(n *natstest.Node) error { n.Kill(); return nil }, (*natstest.Node).Restart)
}

// TestLeaderPauseDuringWorkload freezes (SIGSTOP) the leader of an R3
// bucket's stream during the same workloads, until the others have elected
// a new leader, then lets it run (SIGCONT): for a moment it still believes
// it leads, as a leader cut off by a partition does. The tokens must keep
// rising throughout, and the Store's histories across the fault and after
// the resumed node has stepped down must be linearizable.
func TestLeaderPauseDuringWorkload(t *testing.T) {
	t.Parallel()
	leaderFaultDuringWorkload(t, "paused", (*natstest.Node).Pause, (*natstest.Node).Resume)
}

// leaderFaultDuringWorkload runs the workloads, applies fault to the
// stream's leader, waits until the other nodes have elected a new one,
// heals the faulted node, waits for more progress, and checks the outcome.
// The workloads' client may be connected to the faulted node (with
// nats.go's default options, as here, a client of a frozen server waits
// for it: docs/nats.md), so progress is only required after the heal.
//
// The lock workload runs from start to end. Store histories are checked
// one after the other from the start until the new leader is elected (the
// one in flight then is cut short, before the heal), and then two more
// once the healed node itself names another leader. Not in between: a
// paused leader that resumes answers reads from its old state until it
// hears of the new leader (NATS's Raft has no read lease: docs/nats.md, as
// for a partition), so a Get there may miss acknowledged writes however
// correct the adapter is; whether one did was timing luck. Across that
// window the fencing is what must hold, and the lock workload checks it.
func leaderFaultDuringWorkload(t *testing.T, what string, fault, heal func(*natstest.Node) error) {
	c := natstest.New(t, natstest.Config{Nodes: 3, Monitor: true})
	_, js := natstest.Connect(t, c.URLs())
	bucket := natstest.Bucket(t, js, 3)
	store, backend := newStore(t, js, bucket), direct{newBackend(t, js, bucket)}

	stop := make(chan struct{})
	stopOnce := sync.OnceFunc(func() { close(stop) })
	var progress atomic.Int64
	var wg sync.WaitGroup
	// On a failed check, end the workloads before the connection closes.
	t.Cleanup(func() { stopOnce(); wg.Wait() })
	var maxTok fence.Token
	wg.Add(1)
	go func() {
		defer wg.Done()
		maxTok, _ = lockWorkload(t, backend, "leader-kill", stop, &progress)
	}()
	endHistories := checkHistories(store)
	t.Cleanup(func() { _, _ = endHistories() })
	waitProgress(t, &progress, 5)
	leader := streamLeader(t, js, bucket)
	var killed *natstest.Node
	for _, n := range c.Nodes {
		if n.Name == leader {
			killed = n
		}
	}
	if killed == nil {
		t.Fatalf("leader %q is none of the cluster's nodes", leader)
	}
	start := time.Now()
	if err := fault(killed); err != nil {
		t.Fatal(err)
	}
	var others []string
	for _, n := range c.Nodes {
		if n != killed {
			others = append(others, n.URL())
		}
	}
	_, watch := natstest.Connect(t, others, natsgo.IgnoreDiscoveredServers())
	newLeader := ""
	for deadline := start.Add(60 * time.Second); ; {
		if l := streamLeaderOnce(watch, bucket); l != "" && l != leader {
			newLeader = l
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader 60s after the leader was %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s elected after %v", newLeader, time.Since(start))
	histories, linErr := endHistories()
	if linErr != nil {
		t.Fatalf("Store history across the leader fault: %v", linErr)
	}
	if err := heal(killed); err != nil {
		t.Fatal(err)
	}
	waitProgress(t, &progress, progress.Load()+5)
	t.Logf("lock works after %v", time.Since(start))
	stream := "KV_" + bucket
	for deadline := time.Now().Add(60 * time.Second); ; {
		l, err := killed.StreamLeader(stream)
		if err == nil && l != "" && l != killed.Name {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (%s, then healed) still names leader %q (%v) after 60s", killed.Name, what, l, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s follows again after %v", killed.Name, time.Since(start))
	// Two whole Store histories while the healed node catches up.
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := fencetest.CheckLinearizable(ctx, store, fencetest.Namespace(), &fencetest.LinearizableOptions{Workers: 4, Ops: 30})
		cut := ctx.Err()
		cancel()
		if err != nil {
			t.Fatalf("Store history %d after the heal: %v", i+1, err)
		}
		if cut != nil {
			t.Fatalf("Store history %d after the heal not done within 60s", i+1)
		}
		histories++
	}
	stopOnce()
	wg.Wait()
	t.Logf("workloads done after %v", time.Since(start))
	// An acquisition whose reply was lost may hold the lock until its TTL.
	var tok fence.Token
	var err error
	for deadline := time.Now().Add(2*workloadTTL + 10*time.Second); ; {
		tok, err = backend.Acquire(testkit.Context(t), "leader-kill", testkit.Owner(t), workloadTTL)
		if err == nil || !driver.Retryable(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || tok <= maxTok {
		t.Fatalf("Acquire after the workload = %d, %v; want a token above %d", tok, err, maxTok)
	}
	t.Logf("leader %s %s; %d acquisitions, largest token %d; %d Store histories checked", leader, what, progress.Load(), maxTok, histories)
}

// checkHistories checks Store histories on store one after the other, each
// on fresh keys, until the function it returns is called: that cuts the
// history in flight short (its calls cut count as unknown outcomes), waits
// for its check, and returns how many histories were checked and the first
// error. Calling it again returns the same.
func checkHistories(store fence.Store) func() (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		defer close(done)
		for err == nil && ctx.Err() == nil {
			err = fencetest.CheckLinearizable(ctx, store, fencetest.Namespace(), &fencetest.LinearizableOptions{Workers: 4, Ops: 30})
			n++
		}
	}()
	return sync.OnceValues(func() (int, error) {
		cancel()
		<-done
		return n, err
	})
}

// waitProgress waits until progress reaches n, failing t after 60s.
func waitProgress(t *testing.T, progress *atomic.Int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for progress.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("workload stuck at %d acquisitions, want %d", progress.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCrashEveryNode kills (-9) every node of a three-node cluster at once
// while a lock is taken and released in a loop and a Store key is written
// with rising tokens, restarts them all, and checks what survived: no token
// acknowledged before the crash is issued again, and the Store's fence is
// at least the last acknowledged write's token. It runs with JetStream's
// default sync_interval (fsync every two minutes) and with
// sync_interval: always. A kill -9 loses a process, not the operating
// system's page cache, so it does not reach the window that an unsynced
// write has under a power loss or a kernel crash (docs/nats.md).
func TestCrashEveryNode(t *testing.T) {
	t.Parallel() // a cluster of its own; mostly waiting for elections
	for _, sc := range []struct {
		name   string
		always bool
	}{{"DefaultSync", false}, {"SyncAlways", true}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c := natstest.New(t, natstest.Config{Nodes: 3, SyncAlways: sc.always})
			_, js := natstest.Connect(t, c.URLs())
			bucket := natstest.Bucket(t, js, 3)
			store, backend := newStore(t, js, bucket), direct{newBackend(t, js, bucket)}

			stop := make(chan struct{})
			var progress atomic.Int64
			var maxTok fence.Token
			var maxPut atomic.Int64
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				maxTok, _ = lockWorkload(t, backend, "crash", stop, &progress)
			}()
			go func() {
				defer wg.Done()
				for tok := fence.Token(1); ; tok++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					if store.Put(ctx, "k", tok, []byte("v")) == nil {
						maxPut.Store(int64(tok))
					}
					cancel()
				}
			}()
			waitProgress(t, &progress, 20)
			var kill sync.WaitGroup
			for _, n := range c.Nodes {
				kill.Add(1)
				go func() { defer kill.Done(); n.Kill() }()
			}
			kill.Wait()
			close(stop)
			wg.Wait()
			for _, n := range c.Nodes {
				if err := n.Restart(); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.WaitReady(60 * time.Second); err != nil {
				t.Fatal(err)
			}
			streamLeader(t, js, bucket)

			ctx := testkit.Context(t)
			var tok fence.Token
			var err error
			for deadline := time.Now().Add(30 * time.Second); ; {
				tok, err = backend.Acquire(ctx, "crash", testkit.Owner(t), 10*time.Second)
				if err == nil || time.Now().After(deadline) || !driver.Retryable(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("Acquire after the restart: %v", err)
			}
			if tok <= maxTok {
				t.Errorf("token %d after the crash, but %d was acknowledged before it: a token was issued again", tok, maxTok)
			}
			rec, err := store.Get(ctx, "k")
			if err != nil {
				t.Fatalf("Get after the restart: %v", err)
			}
			if int64(rec.Fence) < maxPut.Load() {
				t.Errorf("fence %d after the crash, but a Put with token %d was acknowledged: an acknowledged write was lost", rec.Fence, maxPut.Load())
			}
			t.Logf("%d acquisitions before the crash, largest token %d, token after %d; last acknowledged Put %d, fence after %d",
				progress.Load(), maxTok, tok, maxPut.Load(), rec.Fence)
		})
	}
}

// TestNoQuorumFailsTransient: with two of three nodes down the bucket's
// stream has no leader, and JetStream answers a request to it with silence,
// not an error. A call with a long deadline must still come back after
// about RequestTimeout with an error that lock.Client retries, instead of
// waiting for its context to end.
func TestNoQuorumFailsTransient(t *testing.T) {
	t.Parallel() // a cluster of its own; mostly waiting for elections
	c := natstest.New(t, natstest.Config{Nodes: 3})
	_, js := natstest.Connect(t, c.URLs()[:1])
	bucket := natstest.Bucket(t, js, 3)
	store, backend := newStore(t, js, bucket), direct{newBackend(t, js, bucket)}
	c.Nodes[1].Kill()
	c.Nodes[2].Kill()
	for _, call := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"Put", func(ctx context.Context) error { return store.Put(ctx, "k", 1, []byte("v")) }},
		{"Acquire", func(ctx context.Context) error {
			_, err := backend.Acquire(ctx, "l", testkit.Owner(t), time.Second)
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		start := time.Now()
		err := call.do(ctx)
		took := time.Since(start)
		ended := ctx.Err()
		cancel()
		if err == nil || !driver.Retryable(err) || ended != nil {
			t.Errorf("%s without a quorum: %v after %v; want a retryable error before the context ends", call.name, err, took)
		}
		if took > fencenats.RequestTimeout+5*time.Second {
			t.Errorf("%s without a quorum took %v, want about %v", call.name, took, fencenats.RequestTimeout)
		}
	}
}

// TestTokensAfterEmptyStreamRestart: when every lease has ended, the
// bucket's stream may hold no message at all (released names' markers
// expire too), and its last sequence, the floor of every next token, is
// then kept only in the stream's state. After a clean stop and after a
// kill -9 of the server with the stream empty, the next token must still
// be above every earlier one.
func TestTokensAfterEmptyStreamRestart(t *testing.T) {
	t.Parallel()
	for _, crash := range []bool{false, true} {
		c := natstest.New(t, natstest.Config{Nodes: 1})
		_, js := natstest.Connect(t, c.URLs())
		bucket := natstest.Bucket(t, js, 1)
		b := direct{newBackend(t, js, bucket)}
		ctx := testkit.Context(t)
		var last fence.Token
		for i := 0; i < 3; i++ {
			owner := testkit.Owner(t)
			tok, err := b.Acquire(ctx, "empty", owner, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			last = tok
			if err := b.Release(ctx, "empty", owner); err != nil {
				t.Fatal(err)
			}
		}
		// Wait until the release markers and the server's limit markers
		// have expired: the stream is empty.
		for deadline := time.Now().Add(15 * time.Second); ; {
			s, err := js.Stream(ctx, "KV_"+bucket)
			if err != nil {
				t.Fatal(err)
			}
			if st := s.CachedInfo().State; st.Msgs == 0 {
				t.Logf("stream empty, last sequence %d", st.LastSeq)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stream not empty 15s after the last release")
			}
			time.Sleep(200 * time.Millisecond)
		}
		if crash {
			c.Nodes[0].Kill()
		} else {
			c.Nodes[0].Stop()
		}
		if err := c.Nodes[0].Restart(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		var tok fence.Token
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; {
			tok, err = b.Acquire(ctx, "empty", testkit.Owner(t), time.Second)
			if err == nil || !driver.Retryable(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("Acquire after the restart (kill -9: %v): %v", crash, err)
		}
		if tok <= last {
			t.Errorf("kill -9: %v: token %d after the restart of an empty stream, but %d was issued before: a token was issued again", crash, tok, last)
		}
	}
}
