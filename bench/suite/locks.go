package suite

import (
	"context"
	"fmt"
	"math"
	"testing"
)

// A lockImpl is one Redis lock library under test. Its worker makes one
// attempt at a lock and, when it got it, releases it at once: that is the
// cycle the three Redis lock groups time.
type lockImpl struct {
	name     string
	baseline bool
	order    int
	// newWorker returns worker w's cycle. It runs outside the timer.
	newWorker func(e *Env, w int) cycle
}

// cycle tries once to take key and releases it if taken; it reports whether
// it took it. Being an interface method (not a closure) keeps the harness
// free of allocations of its own.
type cycle interface {
	cycle(ctx context.Context, key string) (bool, error)
}

var lockImpls []lockImpl

func addLockImpl(li lockImpl) {
	lockImpls = append(lockImpls, li)
	addCase(Case{Group: "redis-cycle-1", Name: li.name, Baseline: li.baseline, Order: li.order,
		Op: func(e *Env) (op, error) { return benchCycleLatency(e, li) }})
	addCase(Case{Group: "redis-cycle-32", Name: li.name, Baseline: li.baseline, Order: li.order,
		Run: func(b *testing.B, e *Env) { benchCycleThroughput(b, e, li) }})
	addCase(Case{Group: "redis-contend-32", Name: li.name, Baseline: li.baseline, Order: li.order,
		Run: func(b *testing.B, e *Env) { benchCycleContention(b, e, li) }})
}

func init() {
	addGroup(Group{ID: "redis-cycle-1", Title: "Redis: acquire + release, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedRedis,
		Note: "One goroutine takes and releases the same free lock in a loop. Lower is better."})
	addGroup(Group{ID: "redis-cycle-32", Title: fmt.Sprintf("Redis: acquire + release, %d goroutines on distinct keys (throughput)", Workers),
		Kind: Throughput, Needs: NeedRedis,
		Note: "Each worker cycles its own lock; ns/op is wall time per cycle across all workers. Higher ops/s is better."})
	addGroup(Group{ID: "redis-contend-32", Title: fmt.Sprintf("Redis: %d goroutines contending for one key", Workers),
		Kind: Contention, Needs: NeedRedis,
		Note: "Every worker tries once, releases at once when it won, and tries again; acq/s counts wins. " +
			"The spread is of per-worker wins per second; CV = stddev / mean."})
}

func benchCycleLatency(e *Env, li lockImpl) (op, error) {
	key := e.Key(li.name, "lat")
	w := li.newWorker(e, 0)
	return func(ctx context.Context) (bool, error) {
		ok, err := w.cycle(ctx, key)
		if err == nil && !ok {
			err = fmt.Errorf("%s: free lock %q not acquired: %w", li.name, key, errUnexpected)
		}
		return ok, err
	}, nil
}

func benchCycleThroughput(b *testing.B, e *Env, li lockImpl) {
	st := runWorkers(b, e, Workers, func(w int) op {
		key := e.Key(li.name, "tp", w)
		c := li.newWorker(e, w)
		return func(ctx context.Context) (bool, error) {
			ok, err := c.cycle(ctx, key)
			if err == nil && !ok {
				err = fmt.Errorf("%s: free lock %q not acquired: %w", li.name, key, errUnexpected)
			}
			return ok, err
		}
	})
	b.ReportMetric(float64(b.N)/st.Elapsed.Seconds(), "ops/s")
}

func benchCycleContention(b *testing.B, e *Env, li lockImpl) {
	key := e.Key(li.name, "contend")
	st := runWorkers(b, e, Workers, func(w int) op {
		c := li.newWorker(e, w)
		return func(ctx context.Context) (bool, error) { return c.cycle(ctx, key) }
	})
	ReportContention(b, st, b.N)
}

// ReportContention reports acquisitions per second, the share of attempts
// that won, and the spread of per-worker wins per second.
func ReportContention(b *testing.B, st WorkerStats, attempts int) {
	secs := st.Elapsed.Seconds()
	if secs <= 0 {
		return
	}
	var total int64
	for _, n := range st.Wins {
		total += n
	}
	rates := make([]float64, len(st.Wins))
	for i, n := range st.Wins {
		rates[i] = float64(n) / secs
	}
	s := Spread(rates)
	b.ReportMetric(float64(total)/secs, "acq/s")
	b.ReportMetric(100*float64(total)/float64(max(attempts, 1)), "win-%")
	b.ReportMetric(s.Min, "worker-min-acq/s")
	b.ReportMetric(s.Max, "worker-max-acq/s")
	b.ReportMetric(s.StdDev, "worker-sd-acq/s")
	if s.Mean > 0 {
		b.ReportMetric(100*s.StdDev/s.Mean, "worker-cv-%")
	}
}

// SpreadStats summarises per-worker numbers.
type SpreadStats struct{ Min, Max, Mean, StdDev float64 }

// Spread returns the minimum, maximum, mean and population standard
// deviation of xs.
func Spread(xs []float64) SpreadStats {
	if len(xs) == 0 {
		return SpreadStats{}
	}
	s := SpreadStats{Min: math.Inf(1), Max: math.Inf(-1)}
	var sum float64
	for _, x := range xs {
		s.Min = min(s.Min, x)
		s.Max = max(s.Max, x)
		sum += x
	}
	s.Mean = sum / float64(len(xs))
	var sq float64
	for _, x := range xs {
		sq += (x - s.Mean) * (x - s.Mean)
	}
	s.StdDev = math.Sqrt(sq / float64(len(xs)))
	return s
}
