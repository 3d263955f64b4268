// Package contention measures locks under contention: W workers loop on one
// lock name (blocking acquire, hold, release) for a fixed time, and the
// result says how long they waited, how fast the lock passed from one
// holder to the next, how evenly the acquisitions were shared, and how much
// server work each acquisition cost (issue 22).
package contention

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Locker is one worker's handle on the lock under test.
type Locker interface {
	// Lock blocks until the worker holds the lock, or ctx ends; it returns
	// the call that releases it.
	Lock(ctx context.Context) (unlock func(context.Context) error, err error)
}

// Row is one lock implementation: New returns worker i's Locker on the
// lock name. Redis, when set, is the server whose commands are counted;
// Work, when set, counts the server work otherwise (the SQL rows: the
// statements their clients sent).
type Row struct {
	Name  string
	Redis *goredis.Client
	Work  func(ctx context.Context) (int64, error)
	// WorkBy, when set, is Work by kind of command or statement (for
	// Result.CommandsBy); a Redis row gets INFO commandstats without it.
	WorkBy func(ctx context.Context) (map[string]int64, error)
	New    func(name string, worker int) (Locker, error)
}

// Result is one row at one number of workers.
type Result struct {
	Row          string
	Workers      int
	Acquisitions int
	PerSecond    float64
	// Waits: from the call to acquire to the lock. WaitMax includes the
	// waits still unfinished when the run ended (Unfinished says how many).
	WaitP50, WaitP99, WaitMax time.Duration
	Unfinished                int
	// Handoffs: from the start of a release to the next acquisition.
	HandoffP50, HandoffP99 time.Duration
	// Acquisitions per worker.
	MinPerWorker, MaxPerWorker int
	CV                         float64 // coefficient of variation
	// Server work per acquisition: Redis commands (every command the
	// server ran, those run by scripts included, as INFO commandstats
	// counts them), or the statements of a SQL row; NaN without either.
	CommandsPerAcquisition float64
	// CommandsBy breaks CommandsPerAcquisition down by command name (the
	// Redis rows) or statement (the PostgreSQL rows); nil otherwise.
	CommandsBy map[string]float64
	Errors     int // failed acquires other than the run's end
}

// Run measures row with the given number of workers, each holding the
// lock for hold, for d.
func Run(ctx context.Context, row Row, name string, workers int, hold, d time.Duration) (Result, error) {
	lockers := make([]Locker, workers)
	for i := range lockers {
		l, err := row.New(name, i)
		if err != nil {
			return Result{}, err
		}
		lockers[i] = l
	}
	work := row.Work
	if work == nil {
		work = func(ctx context.Context) (int64, error) { return commandCalls(ctx, row.Redis) }
	}
	before, err := work(ctx)
	if err != nil {
		return Result{}, err
	}
	workBy := row.WorkBy
	if workBy == nil {
		workBy = func(ctx context.Context) (map[string]int64, error) { return commandCallsBy(ctx, row.Redis) }
	}
	byBefore, err := workBy(ctx)
	if err != nil {
		return Result{}, err
	}
	var (
		mu          sync.Mutex
		waits       []time.Duration
		handoffs    []time.Duration
		lastRelease time.Time
		counts      = make([]int, workers)
		unfinished  []time.Duration
		errs        int
	)
	start := time.Now()
	end := start.Add(d)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				t0 := time.Now()
				unlock, err := l.Lock(runCtx)
				t1 := time.Now()
				if err != nil {
					mu.Lock()
					if runCtx.Err() != nil {
						unfinished = append(unfinished, end.Sub(t0))
						mu.Unlock()
						return
					}
					errs++
					mu.Unlock()
					continue
				}
				mu.Lock()
				waits = append(waits, t1.Sub(t0))
				if !lastRelease.IsZero() {
					handoffs = append(handoffs, t1.Sub(lastRelease))
				}
				counts[i]++
				mu.Unlock()
				time.Sleep(hold)
				mu.Lock()
				lastRelease = time.Now()
				mu.Unlock()
				_ = unlock(context.WithoutCancel(ctx))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := work(ctx)
	if err != nil {
		return Result{}, err
	}
	byAfter, err := workBy(ctx)
	if err != nil {
		return Result{}, err
	}
	r := Result{Row: row.Name, Workers: workers, Acquisitions: len(waits), Unfinished: len(unfinished), Errors: errs}
	r.PerSecond = float64(len(waits)) / elapsed.Seconds()
	r.WaitP50, r.WaitP99 = percentile(waits, 0.50), percentile(waits, 0.99)
	r.WaitMax = max(percentile(waits, 1), percentile(unfinished, 1))
	r.HandoffP50, r.HandoffP99 = percentile(handoffs, 0.50), percentile(handoffs, 0.99)
	r.MinPerWorker, r.MaxPerWorker = slices.Min(counts), slices.Max(counts)
	r.CV = cv(counts)
	r.CommandsPerAcquisition = math.NaN()
	if (row.Redis != nil || row.Work != nil) && len(waits) > 0 {
		r.CommandsPerAcquisition = float64(after-before) / float64(len(waits))
	}
	if byAfter != nil && len(waits) > 0 {
		r.CommandsBy = map[string]float64{}
		for name, n := range byAfter {
			if d := n - byBefore[name]; d > 0 {
				r.CommandsBy[name] = float64(d) / float64(len(waits))
			}
		}
	}
	return r, nil
}

// percentile returns the nearest-rank q-quantile of ds (0 when empty).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// cv is the coefficient of variation (population standard deviation over
// the mean) of counts.
func cv(counts []int) float64 {
	var sum float64
	for _, c := range counts {
		sum += float64(c)
	}
	mean := sum / float64(len(counts))
	if mean == 0 {
		return math.NaN()
	}
	var v float64
	for _, c := range counts {
		v += (float64(c) - mean) * (float64(c) - mean)
	}
	return math.Sqrt(v/float64(len(counts))) / mean
}

// commandCalls sums the calls of INFO commandstats, leaving out the
// commands of the measurement and of connection set-up.
func commandCalls(ctx context.Context, c *goredis.Client) (int64, error) {
	by, err := commandCallsBy(ctx, c)
	var total int64
	for _, n := range by {
		total += n
	}
	return total, err
}

// commandCallsBy is commandCalls by command name; nil without a client.
func commandCallsBy(ctx context.Context, c *goredis.Client) (map[string]int64, error) {
	if c == nil {
		return nil, nil
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	by := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":")
		switch {
		case name == "info", name == "hello", name == "ping", strings.HasPrefix(name, "client"), strings.HasPrefix(name, "config"):
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return nil, errors.New("commandstats: " + line)
		}
		by[name] = n
	}
	return by, nil
}
