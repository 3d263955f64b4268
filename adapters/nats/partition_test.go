package nats_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// partitionOp is one call of the partition workload, as its caller saw it.
type partitionOp struct {
	minority bool // made by a client of the isolated node
	put      bool // a fenced Put; otherwise an Acquire
	token    fence.Token
	ok       bool // acknowledged
	stale    bool // refused as stale
	err      error
	call     int64 // nanoseconds since the workload began
	ret      int64
}

// partitionHistory collects the workload's calls.
type partitionHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []partitionOp
	acqs  [2]atomic.Int64 // acknowledged acquisitions: majority, minority
}

func (h *partitionHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *partitionHistory) add(o partitionOp) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
	if o.ok && !o.put {
		side := 0
		if o.minority {
			side = 1
		}
		h.acqs[side].Add(1)
	}
}

// partitionWorker takes the shared lock with a new owner each time, writes
// the shared key fenced with the token, now and then writes again with its
// previous token (a holder that does not know it lost the lock), and
// releases, until stop is closed.
func partitionWorker(h *partitionHistory, minority bool, b direct, s *fencenats.Store, stop <-chan struct{}) {
	var prev fence.Token
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		owner, _ := lock.NewOwner()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		call := h.now()
		tok, err := b.Acquire(ctx, "partition", owner, workloadTTL)
		h.add(partitionOp{minority: minority, token: tok, ok: err == nil, err: err, call: call, ret: h.now()})
		if err == nil {
			put := func(t fence.Token) {
				call := h.now()
				err := s.Put(ctx, "k", t, []byte(owner))
				h.add(partitionOp{minority: minority, put: true, token: t, ok: err == nil, stale: errors.Is(err, fence.ErrStale), err: err, call: call, ret: h.now()})
			}
			put(tok)
			if prev != 0 && i%3 == 0 {
				put(prev)
			}
			prev = tok
			_ = b.Release(ctx, "partition", owner)
		} else {
			// Held by another worker, or no answer: wait a little.
			select {
			case <-stop:
			case <-time.After(20 * time.Millisecond):
			}
		}
		cancel()
	}
}

// minorityRead is what a client of the isolated node read during the
// partition.
type minorityRead struct {
	call  int64         // as partitionOp.call
	at    time.Duration // since the partition began
	fence fence.Token
	err   error // of the Get
	// inspectErr is the error of an Inspect of the lock right after.
	inspectErr error
}

// staleReadBound is how long into a partition the isolated old leader may
// still answer reads: it answered for 7 to 16 s on the test machine.
const staleReadBound = 90 * time.Second

// TestLeaderPartitionDuringWorkload isolates the leader of an R3 bucket's
// stream from the two other nodes with a network partition (its route
// connections black-holed by fault proxies, new ones refused) while workers
// on both sides take a lock and write a key fenced with their tokens, some
// of them through a client of the isolated node (the minority side), the
// others through clients of the two other nodes (the majority side). The
// isolated node keeps running and answering its clients. Then the
// partition heals.
//
// It checks that no token is ever issued twice, that the Store never
// accepts a write whose token is below that of a write acknowledged before
// it was made (so no two holders' writes land out of order), that the
// fence at the end is at least every acknowledged write's token, that no
// write made through the isolated node after the partition began is
// acknowledged, that the majority side elects a leader and takes the lock
// again within 60 s, and that the minority side takes it again within 60 s
// of the heal. A client of the isolated node reads the key and inspects the
// lock every 50 ms: the old leader answers with its last state, missing the
// majority's writes, until it finds out, then every call fails at once with
// a retryable error. The test requires that it finds out within
// staleReadBound, that a read never reports a fence no write carried, and
// that every error is retryable, and logs how long the stale reads lasted.
func TestLeaderPartitionDuringWorkload(t *testing.T) {
	t.Parallel() // a cluster of its own; mostly waiting for elections
	c, links := natstest.NewPartitionable(t, natstest.Config{Nodes: 3})
	_, admin := natstest.Connect(t, c.URLs())
	bucket := natstest.Bucket(t, admin, 3)
	leader := streamLeader(t, admin, bucket)
	li := slices.IndexFunc(c.Nodes, func(n *natstest.Node) bool { return n.Name == leader })
	if li < 0 {
		t.Fatalf("leader %q is none of the cluster's nodes", leader)
	}
	var majURLs []string
	for i, n := range c.Nodes {
		if i != li {
			majURLs = append(majURLs, n.URL())
		}
	}
	// Each side's clients keep to their nodes, as clients on each side of
	// a real partition would.
	prefix := &fencenats.BackendOptions{Prefix: testkit.Namespace(t)}
	sprefix := &fencenats.StoreOptions{Prefix: prefix.Prefix}
	side := func(urls []string) (direct, *fencenats.Store) {
		_, js := natstest.Connect(t, urls, natsgo.IgnoreDiscoveredServers())
		b, err := fencenats.NewBackend(t.Context(), js, bucket, prefix)
		if err != nil {
			t.Fatal(err)
		}
		s, err := fencenats.NewStore(t.Context(), js, bucket, sprefix)
		if err != nil {
			t.Fatal(err)
		}
		return direct{b}, s
	}
	minB, minS := side([]string{c.Nodes[li].URL()})
	majB, majS := side(majURLs)
	majB2, majS2 := side(majURLs[1:])

	h := &partitionHistory{start: time.Now()}
	stop := make(chan struct{})
	stopOnce := sync.OnceFunc(func() { close(stop) })
	var wg sync.WaitGroup
	t.Cleanup(func() { stopOnce(); wg.Wait() })
	for _, w := range []struct {
		minority bool
		b        direct
		s        *fencenats.Store
	}{{true, minB, minS}, {true, minB, minS}, {false, majB, majS}, {false, majB2, majS2}} {
		wg.Add(1)
		go func() { defer wg.Done(); partitionWorker(h, w.minority, w.b, w.s, stop) }()
	}
	waitProgress(t, &h.acqs[0], 5)
	waitProgress(t, &h.acqs[1], 5)
	if now := streamLeader(t, admin, bucket); now != leader {
		t.Fatalf("the stream's leader moved from %s to %s before the partition", leader, now)
	}

	// The partition. From its start, a client of the isolated node reads
	// the key and the lock every 50 ms until the heal.
	links.Isolate(li)
	partStart := time.Now()
	partAt := h.now()
	majAcqs := h.acqs[0].Load()
	var readsMu sync.Mutex
	var reads []minorityRead
	failed := make(chan struct{})
	failedOnce := sync.OnceFunc(func() { close(failed) })
	healing := make(chan struct{})
	var observer sync.WaitGroup
	observer.Add(1)
	go func() {
		defer observer.Done()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			call := h.now()
			rec, err := minS.Get(ctx, "k")
			if errors.Is(err, fence.ErrNotFound) {
				err = nil
			}
			_, ierr := minB.Inspect(ctx, "partition")
			cancel()
			readsMu.Lock()
			reads = append(reads, minorityRead{call: call, at: time.Since(partStart), fence: rec.Fence, err: err, inspectErr: ierr})
			readsMu.Unlock()
			if err != nil {
				failedOnce()
			}
			select {
			case <-healing:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	_, watch := natstest.Connect(t, majURLs, natsgo.IgnoreDiscoveredServers())
	newLeader := ""
	for deadline := time.Now().Add(60 * time.Second); ; {
		if l := streamLeaderOnce(watch, bucket); l != "" && l != leader {
			newLeader = l
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the majority side elected no new leader within 60s of the partition")
		}
		time.Sleep(100 * time.Millisecond)
	}
	elected := time.Since(partStart)
	waitProgress(t, &h.acqs[0], majAcqs+5)
	resumed := time.Since(partStart)
	// Stay partitioned until the isolated node's client has seen its
	// reads fail: the old leader must not answer for ever.
	select {
	case <-failed:
	case <-time.After(time.Until(partStart.Add(staleReadBound))):
		t.Errorf("the isolated node still answered reads %v into the partition", staleReadBound)
	}
	close(healing)
	observer.Wait()
	healAt := h.now()
	links.Heal()
	healed := time.Now()
	minAcqs := h.acqs[1].Load()
	waitProgress(t, &h.acqs[1], minAcqs+3)
	rejoined := time.Since(healed)
	stopOnce()
	wg.Wait()

	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()

	// No token issued twice.
	seen := map[fence.Token]bool{}
	var puts []partitionOp
	var maxPut fence.Token
	written := map[fence.Token]bool{0: true}
	for _, o := range ops {
		if o.put {
			puts = append(puts, o)
			written[o.token] = true
			if o.ok {
				maxPut = max(maxPut, o.token)
			}
			continue
		}
		if o.ok {
			if seen[o.token] {
				t.Errorf("token %d acknowledged to two acquisitions: a token was issued again", o.token)
			}
			seen[o.token] = true
		}
	}
	// No acknowledged write whose token is below that of a write
	// acknowledged before it was made.
	slices.SortFunc(puts, func(a, b partitionOp) int { return int(a.call - b.call) })
	for i, b := range puts {
		if !b.ok {
			continue
		}
		for _, a := range puts[:i] {
			if a.ok && a.ret < b.call && a.token > b.token {
				t.Errorf("Put with token %d (minority side: %v) acknowledged after a Put with token %d (minority side: %v) had been: a stale write was accepted", b.token, b.minority, a.token, a.minority)
			}
		}
	}
	// Nothing written through the isolated node while it was cut off.
	var minRefused, stale int
	var minFirstErr error
	for _, o := range ops {
		if o.minority && o.call > partAt && o.ret < healAt {
			if o.ok {
				t.Errorf("a call through the isolated node acknowledged during the partition (Put: %v, token %d): it cannot have reached a quorum", o.put, o.token)
			}
			if minFirstErr == nil {
				minFirstErr = o.err
			}
			minRefused++
		}
		if o.stale {
			stale++
		}
	}
	// The fence at the end covers every acknowledged write.
	ctx := testkit.Context(t)
	rec, err := majS.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get after the heal: %v", err)
	}
	if rec.Fence < maxPut {
		t.Errorf("fence %d after the heal, but a Put with token %d was acknowledged: an acknowledged write was lost", rec.Fence, maxPut)
	}
	// What the isolated node's client read.
	var lastOK, lastInspectOK, firstErr time.Duration
	var staleReads, answered int
	var firstErrMsg error
	for _, r := range reads {
		if r.inspectErr == nil {
			lastInspectOK = r.at
		} else if !driver.Retryable(r.inspectErr) && !errors.Is(r.inspectErr, context.DeadlineExceeded) {
			t.Errorf("an Inspect through the isolated node %v into the partition: %v; want a retryable error", r.at, r.inspectErr)
		}
		if r.err != nil {
			if !driver.Retryable(r.err) && !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("a read through the isolated node %v into the partition: %v; want a retryable error", r.at, r.err)
			}
			if firstErrMsg == nil {
				firstErr, firstErrMsg = r.at, r.err
			}
			continue
		}
		answered++
		if !written[r.fence] {
			t.Errorf("a read through the isolated node reported fence %d, which no write carried", r.fence)
		}
		for _, p := range puts {
			if p.ok && p.ret < r.call && p.token > r.fence {
				staleReads++
				break
			}
		}
		lastOK = r.at
	}
	t.Logf("leader %s isolated; majority elected %s after %v and took the lock again after %v", leader, newLeader, elected, resumed)
	t.Logf("the isolated node's client: %d of %d reads answered, the last %v into the partition, %d of them missing an acknowledged write; Inspect answered until %v; first failed read %v in: %v",
		answered, len(reads), lastOK, staleReads, lastInspectOK, firstErr, firstErrMsg)
	t.Logf("%d calls through the isolated node during the partition, none acknowledged (first error: %v); healed, the minority side took the lock again after %v; %d acquisitions, %d Puts (%d refused as stale); final fence %d",
		minRefused, minFirstErr, rejoined, len(seen), len(puts), stale, rec.Fence)
}

// streamLeaderOnce asks for the bucket stream's leader once: "" when there
// is none or no answer.
func streamLeaderOnce(js jetstream.JetStream, bucket string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return ""
	}
	if ci := s.CachedInfo().Cluster; ci != nil {
		return ci.Leader
	}
	return ""
}
