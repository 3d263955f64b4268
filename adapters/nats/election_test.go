package nats_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestCallsInFlightEndAtElection: a request to a stream that has no leader
// (its leader was killed, the others have not elected one yet) gets no
// reply, ever: nobody serves it, and the leader elected later does not see
// it. A call that sent one must not wait for RequestTimeout once a leader
// is elected; it ends then, with a transient error, and its caller asks
// the new leader. Reads go out every 200 ms from the kill of the leader
// until one is elected; every read sent before the election must have
// returned within 2 s of it (without the fix, the last ones took about
// RequestTimeout, 5 s, to return).
func TestCallsInFlightEndAtElection(t *testing.T) {
	t.Parallel() // a cluster of its own; mostly waiting for an election
	c := natstest.New(t, natstest.Config{Nodes: 3, Monitor: true})
	_, js0 := natstest.Connect(t, c.URLs())
	bucket := natstest.Bucket(t, js0, 3)
	stream := "KV_" + bucket
	name := streamLeader(t, js0, bucket)
	var leader *natstest.Node
	var survivors []string
	for _, n := range c.Nodes {
		if n.Name == name {
			leader = n
		} else {
			survivors = append(survivors, n.URL())
		}
	}
	if leader == nil {
		t.Fatalf("no node is named %q, the stream's leader", name)
	}
	// The client keeps to the nodes that survive, so that no reply is
	// lost with a connection: what is waited for is the election.
	_, js := natstest.Connect(t, survivors)
	store := newStore(t, js, bucket)
	if err := store.Put(context.Background(), "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}

	type call struct {
		sent, back time.Time
		err        error
	}
	var (
		mu    sync.Mutex
		calls []*call
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	leader.Kill()
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			cl := &call{sent: time.Now()}
			mu.Lock()
			calls = append(calls, cl)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := store.Get(ctx, "k")
				mu.Lock()
				cl.back, cl.err = time.Now(), err
				mu.Unlock()
			}()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	// A survivor that names itself leads: elected.
	var elected time.Time
	for deadline := time.Now().Add(60 * time.Second); elected.IsZero(); {
		for _, n := range c.Nodes {
			if n == leader {
				continue
			}
			if l, err := n.StreamLeader(stream); err == nil && l == n.Name {
				elected = time.Now()
			}
		}
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("no new leader of %s within 60s of killing %s", stream, leader.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	before, failed, worst := 0, 0, time.Duration(0)
	for _, cl := range calls {
		if !cl.sent.Before(elected.Add(-100 * time.Millisecond)) {
			continue // may have reached the new leader
		}
		before++
		worst = max(worst, cl.back.Sub(elected))
		if cl.err != nil {
			failed++
			if !driver.Retryable(cl.err) {
				t.Errorf("a read sent while the stream had no leader: %v; want a retryable error", cl.err)
			}
		}
	}
	t.Logf("%d reads sent in the %v without a leader (%d failed); the last of them returned %v after the election was seen", before, elected.Sub(calls[0].sent).Round(time.Millisecond), failed, worst.Round(time.Millisecond))
	if before == 0 {
		t.Fatal("no read was sent while the stream had no leader")
	}
	if worst > 2*time.Second {
		t.Errorf("a read sent while the stream had no leader returned %v after a leader was elected, want within 2s", worst.Round(time.Millisecond))
	}
}
