// Package suite holds fencekit's side-by-side benchmarks: the cases (each a
// func(*testing.B, *Env)), grouped into rows measured against a baseline, and
// the round-trip and memory measurements. bench/cmd/benchtable runs them and
// writes docs/benchmarks.md; `go test -bench .` in this folder runs the same
// cases as sub-benchmarks of BenchmarkSuite.
package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/bench/internal/servers"
)

// Workers is the goroutine count of the throughput and contention groups.
const Workers = 32

// TTL is the lease of every benchmark lock: long enough never to expire
// during a run (every cycle releases its lock anyway).
const TTL = 10 * time.Second

// ValueSize is the size of every value written.
const ValueSize = 100

// Options says which servers to use.
type Options struct {
	// RedisAddr is host:port of a Redis to use; empty: start a throwaway
	// redis-server. A given server is never flushed: the memory measurement
	// needs a server of our own and is skipped on it.
	RedisAddr string
	// PostgresURL is a PostgreSQL to use; empty: start a throwaway instance
	// (initdb); "off": skip the PostgreSQL groups.
	PostgresURL string
	// NoRedis skips the Redis groups.
	NoRedis bool
	// Logf reports progress; may be nil.
	Logf func(format string, args ...any)
}

// Env is what the cases run against.
type Env struct {
	// Prefix starts every key and table this run creates: unique per run.
	Prefix string

	Redis      *goredis.Client // nil without Redis
	RedisAddr  string
	RedisOwned bool // we started it: FLUSHALL and MEMORY measurements allowed

	PG      *pgxpool.Pool // nil without PostgreSQL
	PGURL   string
	PGOwned bool
	pgPID   int // the postmaster of our own instance, for its CPU time

	// Value is the payload of every write.
	Value []byte

	accountUpdate string // the UPDATE of the pg-tx group

	// timeOps makes runSerial time every operation and report the median
	// and 90th percentile: set by RunCase for the networked latency groups.
	timeOps bool

	logf    func(string, ...any)
	servers []*servers.Server
	closers []func()

	mu      sync.Mutex
	lastErr error
}

// Setup connects to (or starts) the servers.
func Setup(ctx context.Context, opts Options) (*Env, error) {
	e := &Env{Prefix: "fkbench-" + randHex(4), Value: make([]byte, ValueSize), logf: opts.Logf}
	if e.logf == nil {
		e.logf = func(string, ...any) {}
	}
	for i := range e.Value {
		e.Value[i] = 'a' + byte(i%26)
	}
	if !opts.NoRedis {
		if err := e.setupRedis(ctx, opts.RedisAddr); err != nil {
			e.Close()
			return nil, err
		}
	}
	if opts.PostgresURL != "off" {
		if err := e.setupPostgres(ctx, opts.PostgresURL); err != nil {
			e.Close()
			return nil, err
		}
	}
	for _, f := range setups {
		if err := f(ctx, e); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// setups run after the servers are up: each file of the suite may add one
// (creating its tables, say).
var setups []func(context.Context, *Env) error

func (e *Env) setupRedis(ctx context.Context, addr string) error {
	if addr == "" {
		s, err := servers.StartRedis()
		if err != nil {
			return err
		}
		e.servers = append(e.servers, s)
		addr, e.RedisOwned = s.Addr, true
		e.logf("started redis-server on %s", addr)
	}
	e.RedisAddr = addr
	e.Redis = NewRedisClient(addr)
	e.closers = append(e.closers, func() { _ = e.Redis.Close() })
	if err := e.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", addr, err)
	}
	return nil
}

// NewRedisClient returns the client every Redis case shares: RESP3, and a
// pool larger than Workers so that no worker waits for a connection.
func NewRedisClient(addr string, hooks ...goredis.Hook) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{
		Addr:     addr,
		PoolSize: 2 * Workers,
		// Never disturb a measurement with background health traffic.
		ConnMaxIdleTime: -1,
	})
	for _, h := range hooks {
		c.AddHook(h)
	}
	return c
}

func (e *Env) setupPostgres(ctx context.Context, url string) error {
	if url == "" {
		s, err := servers.StartPostgres()
		if err != nil {
			return err
		}
		e.servers = append(e.servers, s)
		url, e.PGOwned, e.pgPID = s.URL, true, s.PID()
		e.logf("started postgres on %s", s.Addr)
	}
	e.PGURL = url
	pool, err := NewPGPool(ctx, url, 2*Workers, nil)
	if err != nil {
		return err
	}
	e.PG = pool
	e.closers = append(e.closers, pool.Close)
	// A freshly started server accepts TCP a moment before it takes queries.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = pool.Ping(ctx)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// NewPGPool returns a pool of up to maxConns connections; cfgf may adjust the
// configuration (a tracer, a dialer).
func NewPGPool(ctx context.Context, url string, maxConns int32, cfgf func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	// No pings between operations: a benchmark's connections are never idle
	// for long and the ping would be an extra round trip.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	if cfgf != nil {
		cfgf(cfg)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Close drops what the run created and stops the servers it started.
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i](ctx, e)
	}
	if e.Redis != nil && !e.RedisOwned {
		_ = DeleteKeys(ctx, e.Redis, "*"+e.Prefix+"*")
	}
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	for _, s := range e.servers {
		s.Stop()
	}
	e.servers, e.closers = nil, nil
}

// cleanups undo the setups (drop tables) before the connections close.
var cleanups []func(context.Context, *Env)

// DeleteKeys deletes every key matching pattern, by SCAN: never FLUSHALL on
// a server that is not ours.
func DeleteKeys(ctx context.Context, c *goredis.Client, pattern string) error {
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	batch := make([]string, 0, 1000)
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := c.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// Key returns a key (or lock name) unique to this run.
func (e *Env) Key(parts ...any) string {
	s := e.Prefix
	for _, p := range parts {
		s += ":" + fmt.Sprint(p)
	}
	return s
}

// LastError returns and clears the last error a case failed with.
func (e *Env) LastError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.lastErr
	e.lastErr = nil
	return err
}

func (e *Env) record(err error) {
	e.mu.Lock()
	if e.lastErr == nil {
		e.lastErr = err
	}
	e.mu.Unlock()
}

// fatal records err for the benchtable command and fails b. Call it only from
// the benchmark's own goroutine.
func (e *Env) fatal(b *testing.B, err error) {
	e.record(err)
	b.Fatal(err)
}

func randHex(n int) string {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		panic(err)
	}
	return hex.EncodeToString(buf)
}

// RunCase runs c on b: the one entry point of `go test -bench` and
// benchtable. On servers of this run's own it also reports the server's CPU
// time per operation around the whole case (Redis: INFO cpu, user + system;
// PostgreSQL: /proc schedstat of the postmaster and its backends): the cost
// that decides throughput once the server saturates, and on this machine,
// where client and server share two cores, part of every latency.
func (e *Env) RunCase(b *testing.B, c Case) {
	b.ReportAllocs()
	g, _ := GroupByID(c.Group)
	var cpu func() (float64, error)
	switch {
	case g.Needs == NeedRedis && e.Redis != nil && e.RedisOwned:
		cpu = func() (float64, error) { return redisCPU(e.Redis) }
	case g.Needs == NeedPostgres && e.pgPID != 0:
		cpu = func() (float64, error) {
			d, err := servers.CPUTime(e.pgPID)
			return d.Seconds(), err
		}
	}
	e.timeOps = g.Kind == Latency && g.Needs != NeedNothing
	defer func() { e.timeOps = false }()
	var before float64
	if cpu != nil {
		var err error
		if before, err = cpu(); err != nil {
			e.fatal(b, err)
		}
	}
	c.Run(b, e)
	if cpu != nil && b.N > 0 {
		after, err := cpu()
		if err != nil {
			e.fatal(b, err)
		}
		b.ReportMetric((after-before)*1e6/float64(b.N), MetricServerCPU)
	}
}

// MetricServerCPU is the unit of the server CPU time per operation
// (report.MetricServerCPU).
const MetricServerCPU = "server-cpu-µs/op"

// redisCPU returns the server's used_cpu_user + used_cpu_sys in seconds.
func redisCPU(c *goredis.Client) (float64, error) {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			sum += f
			found++
		}
	}
	if found != 2 {
		return 0, errors.New("INFO cpu lacks used_cpu_user or used_cpu_sys")
	}
	return sum, nil
}

// op is one iteration of a worker: it reports whether it achieved its goal
// (acquired the lock, for contention) and any unexpected error.
type op func(ctx context.Context) (bool, error)

// WorkerStats is what runWorkers measured.
type WorkerStats struct {
	Elapsed time.Duration
	Wins    []int64 // per worker: iterations whose op returned true
}

// runWorkers runs exactly n goroutines that share b.N iterations between
// them (each takes the next iteration as soon as it finished the previous,
// so a fast worker does more), and times them together. newOp builds each
// worker's op outside the timer.
func runWorkers(b *testing.B, e *Env, n int, newOp func(w int) op) WorkerStats {
	ops := make([]op, n)
	for w := range ops {
		ops[w] = newOp(w)
	}
	ctx := context.Background()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		start = make(chan struct{})
		wins  = make([]int64, n)
		errs  atomic.Int64
	)
	limit := int64(b.N)
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			var won int64
			for next.Add(1) <= limit {
				ok, err := ops[w](ctx)
				if err != nil {
					e.record(err)
					errs.Add(1)
					return
				}
				if ok {
					won++
				}
			}
			wins[w] = won
		}(w)
	}
	b.ResetTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	if errs.Load() > 0 {
		err := e.LastError()
		e.record(err)
		b.Fatalf("%d worker(s) failed: %v", errs.Load(), err)
	}
	return WorkerStats{Elapsed: b.Elapsed(), Wins: wins}
}

// runSerial runs op b.N times on this goroutine. For the networked latency
// groups it also times every operation and reports the median (p50-ns) and
// the 90th percentile (p90-ns): on a shared machine the mean (ns/op) moves
// with every stall of a neighbour, the median far less.
func runSerial(b *testing.B, e *Env, o op) {
	ctx := context.Background()
	if !e.timeOps {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := o(ctx); err != nil {
				b.StopTimer()
				e.fatal(b, err)
			}
		}
		b.StopTimer()
		return
	}
	lat := make([]int64, b.N) // before the timer: not counted in allocs/op
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := o(ctx); err != nil {
			b.StopTimer()
			e.fatal(b, err)
		}
		lat[i] = int64(time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(Percentile(lat, 50)), MetricP50)
	b.ReportMetric(float64(Percentile(lat, 90)), MetricP90)
}

// Units of the per-operation latency percentiles (report.MetricP50, P90).
const (
	MetricP50 = "p50-ns"
	MetricP90 = "p90-ns"
)

// Percentile returns the p-th percentile (nearest rank) of sorted, which
// must be sorted ascending and not empty.
func Percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// errUnexpected marks a result that a case did not expect (a lock held in a
// group where nobody else takes it, say).
var errUnexpected = errors.New("unexpected result")

// OpLatency is what Interleave measured for one case.
type OpLatency struct {
	P50, P90 time.Duration
	Ops      int
}

// Interleave measures the cases' operations (they must have Op) in one loop,
// one operation of each in turn, the starting case rotating every turn,
// for about perCase each. Every case then sees the same moments of the
// machine: on a shared machine whose loopback latency jumps between two
// regimes from one second to the next, a row measured seconds after its
// baseline can land in the other regime, while rows interleaved operation by
// operation cannot.
func (e *Env) Interleave(cs []Case, perCase time.Duration) (map[string]OpLatency, error) {
	ctx := context.Background()
	ops := make([]op, len(cs))
	for i, c := range cs {
		if c.Op == nil {
			return nil, fmt.Errorf("case %s has no Op", c.ID())
		}
		o, err := c.Op(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.ID(), err)
		}
		if _, err := o(ctx); err != nil { // warm: connection, script, statement
			return nil, fmt.Errorf("%s: %w", c.ID(), err)
		}
		ops[i] = o
	}
	lat := make([][]int64, len(cs))
	deadline := time.Now().Add(perCase * time.Duration(len(cs)))
	for turn := 0; time.Now().Before(deadline); turn++ {
		for j := range cs {
			i := (j + turn) % len(cs)
			start := time.Now()
			if _, err := ops[i](ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", cs[i].ID(), err)
			}
			lat[i] = append(lat[i], int64(time.Since(start)))
		}
	}
	out := map[string]OpLatency{}
	for i, c := range cs {
		slices.Sort(lat[i])
		out[c.ID()] = OpLatency{P50: time.Duration(Percentile(lat[i], 50)), P90: time.Duration(Percentile(lat[i], 90)), Ops: len(lat[i])}
	}
	return out, nil
}
