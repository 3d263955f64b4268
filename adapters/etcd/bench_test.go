package etcd_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/lock"
)

// The benchmarks compare a fenced acquire and release (lock.Client over the
// Backend) with etcd's own concurrency.Mutex Lock and Unlock on the same
// cluster, uncontended, one lock name per benchmark. Each reports its round
// trips per operation (rt/op), counted as in TestRoundTrips:
//
//	go test -run '^$' -bench . -benchtime 200x ./
//
// On the embedded test cluster the figures are loopback figures: the ratio
// of ns/op follows the ratio of round trips, each a Raft write.

const benchTTL = 10 * time.Second

func report(b *testing.B, c *counter, before int64) {
	b.ReportMetric(float64(c.n.Load()-before)/float64(b.N), "rt/op")
}

func BenchmarkFencedAcquireRelease(b *testing.B) {
	cl, c := countingClient(b)
	client := lock.New(fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(b)}), nil)
	ctx := context.Background()
	before := c.n.Load()
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
	report(b, c, before)
}

// BenchmarkMutexSharedSession: one session (one lease, kept alive in the
// background) for every Lock: the Mutex's cheapest use, where every lock of
// the process lives and dies with that one lease.
func BenchmarkMutexSharedSession(b *testing.B) {
	cl, c := countingClient(b)
	sess, err := concurrency.NewSession(cl, concurrency.WithTTL(int(benchTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	key := prefix(b) + "bench"
	ctx := context.Background()
	before := c.n.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := mutexCycle(ctx, sess, key); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, c, before)
}

// BenchmarkMutexSessionPerLock: a session per Lock, which is what gives each
// lock a TTL of its own, as the fenced Backend does.
func BenchmarkMutexSessionPerLock(b *testing.B) {
	cl, c := countingClient(b)
	key := prefix(b) + "bench"
	ctx := context.Background()
	before := c.n.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := sessionMutexCycle(ctx, cl, key); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, c, before)
}
