package nats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// The benchmarks compare the fenced calls with plain KV calls on the same
// single-node server and bucket, uncontended: a fenced Put with a KV Put,
// a fenced acquire and release (lock.Client over the Backend: TryAcquire,
// and Acquire, which goes through the queue) with a KV Create (with a
// per-key TTL) and a Delete. Each reports its round trips
// per operation (rt/op), counted as in TestRoundTrips:
//
//	go -C adapters/nats test -run '^$' -bench . -benchtime 500x ./
//
// On loopback the ratio of ns/op follows the ratio of round trips.

const benchTTL = 10 * time.Second

// requests counts the requests a connection sent: each is one round trip.
func requests(nc *natsgo.Conn) uint64 { return nc.Stats().OutMsgs }

func benchEnv(b *testing.B) (*natsgo.Conn, jetstream.JetStream, string) {
	nc, js := natstest.Connect(b, natstest.Single(b).URLs())
	return nc, js, natstest.Bucket(b, js, 1)
}

func reportRT(b *testing.B, nc *natsgo.Conn, before uint64) {
	b.ReportMetric(float64(requests(nc)-before)/float64(b.N), "rt/op")
}

func BenchmarkFencedPut(b *testing.B) {
	nc, js, bucket := benchEnv(b)
	s := newStore(b, js, bucket)
	ctx := context.Background()
	val := []byte("value")
	before := requests(nc)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Put(ctx, "bench", 1, val); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRT(b, nc, before)
}

func BenchmarkPlainKVPut(b *testing.B) {
	nc, js, bucket := benchEnv(b)
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	val := []byte("value")
	before := requests(nc)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := kv.Put(ctx, "bench", val); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRT(b, nc, before)
}

func BenchmarkFencedAcquireRelease(b *testing.B) {
	nc, js, bucket := benchEnv(b)
	client := lock.New(newBackend(b, js, bucket), nil)
	ctx := context.Background()
	before := requests(nc)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := client.TryAcquire(ctx, "bench", benchTTL)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRT(b, nc, before)
}

// BenchmarkFencedQueuedAcquireRelease is BenchmarkFencedAcquireRelease
// through Client.Acquire, which waits in line on this Backend
// (Acquire with a place): uncontended, it costs what TryAcquire costs.
func BenchmarkFencedQueuedAcquireRelease(b *testing.B) {
	nc, js, bucket := benchEnv(b)
	client := lock.New(newBackend(b, js, bucket), nil)
	ctx := context.Background()
	before := requests(nc)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := client.Acquire(ctx, "bench", benchTTL)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRT(b, nc, before)
}

// BenchmarkKVCreateDelete is the hand-made NATS lock: Create with a
// per-key TTL, then Delete (no owner check, no token).
func BenchmarkKVCreateDelete(b *testing.B) {
	nc, js, bucket := benchEnv(b)
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	before := requests(nc)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := kv.Create(ctx, "bench", []byte("owner"), jetstream.KeyTTL(benchTTL)); err != nil {
			b.Fatal(err)
		}
		if err := kv.Delete(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRT(b, nc, before)
}

// TestRoundTrips pins the round trips of each uncontended call, as the
// documentation states them: one for Get; two (a leader read, then the
// conditional write) for a Store write on a key the Store has not seen, for
// Advance, and for a Backend call on a lease it has not seen; one (the
// conditional write alone) for a Put or Delete on a key whose last revision
// the same Store wrote or read, and for Extend, Release and a same-owner
// Acquire of a lease the same Backend took or renewed last; three when the
// remembered revision is stale (the refused write, a read, the write); two
// for Inspect, sent together (a read of the lock key and its line, and a
// stream info for the server's clock and last revision).
func TestRoundTrips(t *testing.T) {
	nc, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	sopts := &fencenats.StoreOptions{Prefix: testkit.Namespace(t)}
	s, err := fencenats.NewStore(testkit.Context(t), js, bucket, sopts)
	if err != nil {
		t.Fatal(err)
	}
	// other is a Store on the same records, on a connection of its own
	// whose requests are not counted.
	_, otherJS := natstest.Connect(t, natstest.Single(t).URLs())
	other, err := fencenats.NewStore(testkit.Context(t), otherJS, bucket, sopts)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := fencenats.NewBackend(testkit.Context(t), js, bucket, nil)
	if err != nil {
		t.Fatal(err)
	}
	rb2, err := fencenats.NewBackend(testkit.Context(t), js, bucket, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, b2 := direct{rb}, direct{rb2}
	ctx := testkit.Context(t)
	owner := testkit.Owner(t)
	for _, c := range []struct {
		name string
		want uint64
		call func() error
	}{
		{"Put", 2, func() error { return s.Put(ctx, "k", 1, []byte("v")) }},
		// The Store remembers the revision it wrote: one publish.
		{"Put again", 1, func() error { return s.Put(ctx, "k", 1, []byte("v")) }},
		{"Advance", 2, func() error { return s.Advance(ctx, "k", 2) }},
		{"Get", 1, func() error { _, err := s.Get(ctx, "k"); return err }},
		{"Delete", 1, func() error { return s.Delete(ctx, "k", 2) }},
		// Another Store wrote the key meanwhile: the publish at the
		// remembered revision is refused, then a read and a publish.
		{"Put (after another Store wrote)", 3, func() error {
			if err := other.Put(ctx, "k", 3, []byte("o")); err != nil {
				return err
			}
			return s.Put(ctx, "k", 3, []byte("v"))
		}},
		// A remembered fence above the token proves nothing the read would
		// not: the write reads, and reports the current fence.
		{"Put with an older token", 1, func() error {
			if err := s.Put(ctx, "k", 2, []byte("v")); !errors.Is(err, fence.ErrStale) {
				return fmt.Errorf("Put with token 2 over fence 3: %v, want ErrStale", err)
			}
			return nil
		}},
		{"Acquire", 2, func() error { _, err := b.Acquire(ctx, "l", owner, benchTTL); return err }},
		{"Acquire again (same owner)", 1, func() error { _, err := b.Acquire(ctx, "l", owner, benchTTL); return err }},
		{"Extend", 1, func() error { return b.Extend(ctx, "l", owner, benchTTL) }},
		{"Inspect", 2, func() error { _, err := b.Inspect(ctx, "l"); return err }},
		{"Release", 1, func() error { return b.Release(ctx, "l", owner) }},
		// Another Backend on the same bucket knows nothing of the lease:
		// it reads first.
		{"Acquire (new Backend)", 2, func() error { _, err := b2.Acquire(ctx, "m", owner, benchTTL); return err }},
		{"Extend (other Backend)", 2, func() error { return b.Extend(ctx, "m", owner, benchTTL) }},
		{"Release (after that Extend)", 1, func() error { return b.Release(ctx, "m", owner) }},
	} {
		before := requests(nc)
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := requests(nc) - before; got != c.want {
			t.Errorf("%s: %d round trips, want %d", c.name, got, c.want)
		}
	}
}
