package nats_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/lock"
)

// BenchmarkContention is bench/contention's measurement on NATS (the bench
// module does not depend on nats.go), as the etcd module's: W workers loop
// on one lock name (blocking acquire, hold 10 ms, release) for
// contentionRun, with fencekit polling (QueueOptions.Polling) and fencekit
// queued (the default on this Backend), all workers sharing one Backend and
// connection, on a single node and on the three-node cluster with an R3
// bucket. It reports the longest wait, the handoff (release → next
// acquisition) p50 and p99, the acquisitions per worker (min and
// coefficient of variation) and the requests per acquisition, counted as in
// TestRoundTrips. Each configuration runs once, whatever b.N:
//
//	go -C adapters/nats test -run '^$' -bench Contention -benchtime 1x ./
func BenchmarkContention(b *testing.B) {
	rows := []struct {
		name string
		q    lock.QueueOptions
	}{
		{"fencekit-polling", lock.QueueOptions{Polling: true}},
		{"fencekit-queued", lock.QueueOptions{}},
	}
	for _, top := range topologies {
		b.Run(top.name, func(b *testing.B) {
			nc, js := natstest.Connect(b, top.cluster(b).URLs())
			bucket := natstest.Bucket(b, js, top.replicas)
			for _, w := range []int{2, 8, 32} {
				for _, row := range rows {
					b.Run(fmt.Sprintf("%s/W=%d", row.name, w), func(b *testing.B) {
						client := lock.New(newBackend(b, js, bucket), &lock.Options{Queue: row.q})
						before := requests(nc)
						r := runContention(b, client, w)
						acq := float64(r.acquisitions)
						b.ReportMetric(acq/contentionRun.Seconds(), "acq/s")
						b.ReportMetric(ms(r.waitMax), "wait-max-ms")
						b.ReportMetric(ms(r.handoffP50), "handoff-p50-ms")
						b.ReportMetric(ms(r.handoffP99), "handoff-p99-ms")
						b.ReportMetric(float64(r.minPerWorker), "min/worker")
						b.ReportMetric(r.cv, "cv")
						b.ReportMetric(float64(requests(nc)-before)/acq, "req/acq")
					})
				}
			}
		})
	}
}

const (
	contentionRun  = 4 * time.Second
	contentionHold = 10 * time.Millisecond
)

type contentionResult struct {
	acquisitions           int
	waitMax                time.Duration
	handoffP50, handoffP99 time.Duration
	minPerWorker           int
	cv                     float64
}

func runContention(b *testing.B, client *lock.Client, workers int) contentionResult {
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
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				l, err := client.Acquire(ctx, "contended", 10*time.Second)
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
				if err := l.Release(context.WithoutCancel(ctx)); err != nil {
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
