package etcd_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/lock"
)

// BenchmarkContention is bench/contention's measurement on etcd (the bench
// module does not depend on etcd): W workers loop on one lock name
// (blocking acquire, hold 10 ms, release) for contentionRun, with fencekit
// polling, fencekit queued (the default on this Backend) and etcd's own
// concurrency.Mutex (a session per worker) on the same cluster. It reports
// the longest wait, the handoff (release → next acquisition) p50 and p99,
// the acquisitions per worker (min and coefficient of variation) and the
// requests per acquisition, counted as in TestRoundTrips. Each
// configuration runs once, whatever b.N:
//
//	go test -run '^$' -bench Contention -benchtime 1x ./
func BenchmarkContention(b *testing.B) {
	rows := []struct {
		name string
		new  func(b *testing.B, cl *clientv3.Client, ns string) func(worker int) locker
	}{
		{"fencekit-polling", fencedRow(lock.QueueOptions{Polling: true})},
		{"fencekit-queued", fencedRow(lock.QueueOptions{})},
		{"etcd-Mutex", mutexRow},
	}
	for _, w := range []int{2, 8, 32} {
		for _, row := range rows {
			b.Run(fmt.Sprintf("%s/W=%d", row.name, w), func(b *testing.B) {
				cl, c := countingClient(b)
				newLocker := row.new(b, cl, prefix(b))
				before := c.n.Load()
				r := runContention(b, newLocker, w)
				acq := float64(r.acquisitions)
				b.ReportMetric(acq/contentionRun.Seconds(), "acq/s")
				b.ReportMetric(ms(r.waitMax), "wait-max-ms")
				b.ReportMetric(ms(r.handoffP50), "handoff-p50-ms")
				b.ReportMetric(ms(r.handoffP99), "handoff-p99-ms")
				b.ReportMetric(float64(r.minPerWorker), "min/worker")
				b.ReportMetric(r.cv, "cv")
				b.ReportMetric(float64(c.n.Load()-before)/acq, "req/acq")
			})
		}
	}
}

const (
	contentionRun  = 4 * time.Second
	contentionHold = 10 * time.Millisecond
)

// locker takes the lock and returns its release.
type locker func(ctx context.Context) (func(context.Context) error, error)

func fencedRow(q lock.QueueOptions) func(b *testing.B, cl *clientv3.Client, ns string) func(int) locker {
	return func(b *testing.B, cl *clientv3.Client, ns string) func(int) locker {
		client := lock.New(fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns}), &lock.Options{Queue: q})
		return func(int) locker {
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := client.Acquire(ctx, "contended", 10*time.Second)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		}
	}
}

func mutexRow(b *testing.B, cl *clientv3.Client, ns string) func(int) locker {
	return func(int) locker {
		s, err := concurrency.NewSession(cl, concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		m := concurrency.NewMutex(s, ns+"contended")
		return func(ctx context.Context) (func(context.Context) error, error) {
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		}
	}
}

type contentionResult struct {
	acquisitions           int
	waitMax                time.Duration
	handoffP50, handoffP99 time.Duration
	minPerWorker           int
	cv                     float64
}

func runContention(b *testing.B, newLocker func(int) locker, workers int) contentionResult {
	ctx, cancel := context.WithTimeout(context.Background(), contentionRun)
	defer cancel()
	var (
		mu          sync.Mutex
		lastRelease time.Time
		handoffs    []time.Duration
		waitMax     time.Duration
		counts      = make([]int, workers)
		wg          sync.WaitGroup
	)
	lockers := make([]locker, workers)
	for i := range lockers {
		lockers[i] = newLocker(i)
	}
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				unlock, err := lockers[i](ctx)
				if err != nil {
					mu.Lock()
					waitMax = max(waitMax, time.Since(start)) // unfinished at the end
					mu.Unlock()
					return
				}
				got := time.Now()
				mu.Lock()
				waitMax = max(waitMax, got.Sub(start))
				if !lastRelease.IsZero() {
					handoffs = append(handoffs, got.Sub(lastRelease))
				}
				counts[i]++
				mu.Unlock()
				time.Sleep(contentionHold) // the work done under the lock
				mu.Lock()
				lastRelease = time.Now()
				mu.Unlock()
				if err := unlock(context.WithoutCancel(ctx)); err != nil {
					b.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(handoffs)
	r := contentionResult{waitMax: waitMax, minPerWorker: slices.Min(counts)}
	var sum, sq float64
	for _, n := range counts {
		r.acquisitions += n
		sum += float64(n)
	}
	mean := sum / float64(workers)
	for _, n := range counts {
		sq += (float64(n) - mean) * (float64(n) - mean)
	}
	if mean > 0 {
		r.cv = math.Sqrt(sq/float64(workers)) / mean
	}
	if len(handoffs) > 0 {
		r.handoffP50 = handoffs[(len(handoffs)-1)/2]
		r.handoffP99 = handoffs[(len(handoffs)*99-1)/100]
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
