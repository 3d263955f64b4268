package suite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
)

// Round trips are counted, not estimated: every connection of the counting
// clients is wrapped, and a round trip is one turn of the conversation, a
// write that follows a read (or opens the connection's traffic). Commands
// (go-redis hook) and statements (pgx tracer) are counted as well.

// Counter counts round trips and commands while enabled.
type Counter struct {
	on       atomic.Bool
	turns    atomic.Int64
	commands atomic.Int64

	mu    sync.Mutex
	names map[string]int // Redis commands sent while enabled, by name
}

func (c *Counter) sent(name string, n int) {
	c.mu.Lock()
	if c.names == nil {
		c.names = map[string]int{}
	}
	c.names[name] += n
	c.mu.Unlock()
}

func (c *Counter) takeNames() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.names
	c.names = nil
	return n
}

// countingConn counts turns on one connection.
type countingConn struct {
	net.Conn
	c *Counter

	mu      sync.Mutex
	writing bool // the last I/O was a write
}

func (cc *countingConn) Write(p []byte) (int, error) {
	cc.mu.Lock()
	if !cc.writing {
		cc.writing = true
		if cc.c.on.Load() {
			cc.c.turns.Add(1)
		}
	}
	cc.mu.Unlock()
	return cc.Conn.Write(p)
}

func (cc *countingConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if n > 0 {
		cc.mu.Lock()
		cc.writing = false
		cc.mu.Unlock()
	}
	return n, err
}

func (c *Counter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

// redisHook counts commands: a pipeline counts each of its commands.
type redisHook struct{ c *Counter }

func (h redisHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h redisHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.c.on.Load() {
			h.c.commands.Add(1)
			h.c.sent(cmd.Name(), 1)
		}
		return next(ctx, cmd)
	}
}

func (h redisHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if h.c.on.Load() {
			h.c.commands.Add(int64(len(cmds)))
			for _, c := range cmds {
				h.c.sent(c.Name(), 1)
			}
		}
		return next(ctx, cmds)
	}
}

// pgTracer counts statements (Begin and Commit included).
type pgTracer struct{ c *Counter }

func (t pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if t.c.on.Load() {
		t.c.commands.Add(1)
	}
	return ctx
}

func (pgTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// RTEnv is what a round-trip case runs on: clients with one connection each,
// every byte of which is counted.
type RTEnv struct {
	*Env
	Redis *goredis.Client
	PG    *pgxpool.Pool

	counter *Counter
	runs    int

	// With serverTime set (a Redis of our own), Measure also reads how long
	// the server spent executing the commands fn sent: CONFIG RESETSTAT
	// before, INFO commandstats after, summing the usec of the commands the
	// client sent (scripts' inner commands are inside EVALSHA's time).
	serverTime bool
	usecs      []float64 // per operation
	ambiguous  bool
}

// Measure counts the round trips of fn. A case calls it exactly once per
// run, around the operation it reports; what it does before and after
// (taking a lock so that it can release it, say) is not counted.
func (r *RTEnv) Measure(fn func() error) error {
	ctx := context.Background()
	if r.serverTime {
		if err := r.Redis.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
	}
	r.counter.takeNames()
	r.counter.on.Store(true)
	err := fn()
	r.counter.on.Store(false)
	r.runs++
	names := r.counter.takeNames()
	if r.serverTime && err == nil {
		stats, serr := commandStats(ctx, r.Redis)
		if serr != nil {
			return serr
		}
		var usec float64
		for name, n := range names {
			st := stats[name]
			if st.calls != int64(n) {
				// The same command ran inside a script too: its time
				// cannot be told apart.
				r.ambiguous = true
			}
			usec += st.usec
		}
		r.usecs = append(r.usecs, usec)
	}
	return err
}

type cmdStat struct {
	calls int64
	usec  float64
}

// commandStats parses INFO commandstats into per-command calls and usec.
// Subcommands ("config|resetstat") keep their full names.
func commandStats(ctx context.Context, c *goredis.Client) (map[string]cmdStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		var st cmdStat
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[name] = st
	}
	return out, nil
}

// RTCase is one operation whose round trips are counted.
type RTCase struct {
	Store string // "Redis" or "PostgreSQL"
	Op    string // the operation, e.g. "acquire (free)"
	Lib   string
	Run   func(ctx context.Context, r *RTEnv) error
}

var rtCases []RTCase

func addRT(c RTCase) { rtCases = append(rtCases, c) }

// RTResult is the count for one RTCase, per operation.
type RTResult struct {
	Store, Op, Lib string
	RoundTrips     float64
	Commands       float64 // commands (Redis) or statements (PostgreSQL)
	// ServerUsec is the Redis server's execution time per operation (INFO
	// commandstats, averaged over ServerTimeRuns); NaN when not measured
	// (PostgreSQL, a shared Redis) or not attributable.
	ServerUsec float64
	Err        error
}

// ServerTimeRuns is how many times each Redis operation runs for its server
// execution time.
const ServerTimeRuns = 2000

// RTRuns is how many times each operation is counted (after one warm-up run
// that loads scripts and prepares statements).
const RTRuns = 20

// MeasureRoundTrips counts every round-trip case that env's servers allow.
func MeasureRoundTrips(ctx context.Context, env *Env) ([]RTResult, error) {
	counter := &Counter{}
	r := &RTEnv{Env: env, counter: counter}
	if env.Redis != nil {
		r.Redis = goredis.NewClient(&goredis.Options{
			Addr:            env.RedisAddr,
			PoolSize:        1,
			ConnMaxIdleTime: -1,
			Dialer:          counter.dial,
		})
		r.Redis.AddHook(redisHook{counter})
		defer r.Redis.Close()
	}
	if env.PG != nil {
		pool, err := NewPGPool(ctx, env.PGURL, 1, func(cfg *pgxpool.Config) {
			cfg.ConnConfig.DialFunc = counter.dial
			cfg.ConnConfig.Tracer = pgTracer{counter}
		})
		if err != nil {
			return nil, err
		}
		r.PG = pool
		defer pool.Close()
	}
	var out []RTResult
	for _, c := range sortedRTCases() {
		if (c.Store == "Redis" && r.Redis == nil) || (c.Store == "PostgreSQL" && r.PG == nil) {
			continue
		}
		res := RTResult{Store: c.Store, Op: c.Op, Lib: c.Lib}
		// Warm-up: scripts loaded (EVALSHA would otherwise miss once),
		// statements prepared, connection dialled.
		r.runs = 0
		if err := c.Run(ctx, r); err != nil {
			res.Err = err
			out = append(out, res)
			continue
		}
		counter.turns.Store(0)
		counter.commands.Store(0)
		r.runs = 0
		for i := 0; i < RTRuns && res.Err == nil; i++ {
			res.Err = c.Run(ctx, r)
		}
		if res.Err == nil && r.runs != RTRuns {
			res.Err = fmt.Errorf("round-trip case %s/%s measured %d times in %d runs", c.Lib, c.Op, r.runs, RTRuns)
		}
		res.RoundTrips = float64(counter.turns.Load()) / RTRuns
		res.Commands = float64(counter.commands.Load()) / RTRuns
		res.ServerUsec = math.NaN()
		if res.Err == nil && c.Store == "Redis" && env.RedisOwned {
			r.serverTime, r.usecs, r.ambiguous, r.runs = true, nil, false, 0
			var err error
			for i := 0; i < ServerTimeRuns && err == nil; i++ {
				err = c.Run(ctx, r)
			}
			r.serverTime = false
			if err == nil && !r.ambiguous && len(r.usecs) == ServerTimeRuns {
				res.ServerUsec = TrimmedMean(r.usecs, 0.9)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

func init() {
	// Plain commands: the unit of the table.
	addRT(RTCase{Store: "Redis", Op: "write", Lib: "plain SET", Run: func(ctx context.Context, r *RTEnv) error {
		return r.Measure(func() error { return r.Redis.Set(ctx, r.Key("rt", "set"), r.Value, 0).Err() })
	}})
	addRT(RTCase{Store: "Redis", Op: "read", Lib: "plain GET", Run: func(ctx context.Context, r *RTEnv) error {
		return r.Measure(func() error { return r.Redis.Get(ctx, r.Key("rt", "set")).Err() })
	}})

	// bsm/redislock.
	rl := func(r *RTEnv) *redislock.Client { return redislock.New(r.Redis) }
	addRT(RTCase{Store: "Redis", Op: "acquire (free)", Lib: "bsm/redislock", Run: func(ctx context.Context, r *RTEnv) error {
		var l *redislock.Lock
		err := r.Measure(func() (err error) { l, err = rl(r).Obtain(ctx, r.Key("rt", "rl"), TTL, nil); return err })
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}})
	addRT(RTCase{Store: "Redis", Op: "acquire (held)", Lib: "bsm/redislock", Run: func(ctx context.Context, r *RTEnv) error {
		key := r.Key("rt", "rl")
		l, err := rl(r).Obtain(ctx, key, TTL, nil)
		if err != nil {
			return err
		}
		defer l.Release(ctx) //nolint:errcheck
		return r.Measure(func() error {
			_, err := rl(r).Obtain(ctx, key, TTL, nil)
			if errors.Is(err, redislock.ErrNotObtained) {
				return nil
			}
			return fmt.Errorf("held lock obtained: %v: %w", err, errUnexpected)
		})
	}})
	addRT(RTCase{Store: "Redis", Op: "extend", Lib: "bsm/redislock", Run: func(ctx context.Context, r *RTEnv) error {
		l, err := rl(r).Obtain(ctx, r.Key("rt", "rl"), TTL, nil)
		if err != nil {
			return err
		}
		defer l.Release(ctx) //nolint:errcheck
		return r.Measure(func() error { return l.Refresh(ctx, TTL, nil) })
	}})
	addRT(RTCase{Store: "Redis", Op: "release", Lib: "bsm/redislock", Run: func(ctx context.Context, r *RTEnv) error {
		l, err := rl(r).Obtain(ctx, r.Key("rt", "rl"), TTL, nil)
		if err != nil {
			return err
		}
		return r.Measure(func() error { return l.Release(ctx) })
	}})

	// go-redsync, one pool.
	rsm := func(r *RTEnv) *redsync.Mutex {
		return redsync.New(redsyncPool(r.Redis)).NewMutex(r.Key("rt", "rs"), redsync.WithExpiry(TTL), redsync.WithTries(1))
	}
	addRT(RTCase{Store: "Redis", Op: "acquire (free)", Lib: "go-redsync", Run: func(ctx context.Context, r *RTEnv) error {
		m := rsm(r)
		if err := r.Measure(func() error { return m.TryLockContext(ctx) }); err != nil {
			return err
		}
		_, err := m.UnlockContext(ctx)
		return err
	}})
	addRT(RTCase{Store: "Redis", Op: "acquire (held)", Lib: "go-redsync", Run: func(ctx context.Context, r *RTEnv) error {
		m := rsm(r)
		if err := m.TryLockContext(ctx); err != nil {
			return err
		}
		defer m.UnlockContext(ctx) //nolint:errcheck
		return r.Measure(func() error {
			if err := rsm(r).TryLockContext(ctx); err == nil {
				return fmt.Errorf("held lock taken: %w", errUnexpected)
			}
			return nil
		})
	}})
	addRT(RTCase{Store: "Redis", Op: "extend", Lib: "go-redsync", Run: func(ctx context.Context, r *RTEnv) error {
		m := rsm(r)
		if err := m.TryLockContext(ctx); err != nil {
			return err
		}
		defer m.UnlockContext(ctx) //nolint:errcheck
		return r.Measure(func() error {
			ok, err := m.ExtendContext(ctx)
			if err == nil && !ok {
				err = fmt.Errorf("extend false: %w", errUnexpected)
			}
			return err
		})
	}})
	addRT(RTCase{Store: "Redis", Op: "release", Lib: "go-redsync", Run: func(ctx context.Context, r *RTEnv) error {
		m := rsm(r)
		if err := m.TryLockContext(ctx); err != nil {
			return err
		}
		return r.Measure(func() error { _, err := m.UnlockContext(ctx); return err })
	}})

	// PostgreSQL baselines.
	addRT(RTCase{Store: "PostgreSQL", Op: "write", Lib: "plain upsert", Run: func(ctx context.Context, r *RTEnv) error {
		return r.Measure(func() error {
			_, err := r.PG.Exec(ctx, r.plainUpsertSQL(), r.Key("rt", "upsert"), r.Value)
			return err
		})
	}})
	addRT(RTCase{Store: "PostgreSQL", Op: "transaction", Lib: "plain BEGIN; UPDATE; COMMIT", Run: func(ctx context.Context, r *RTEnv) error {
		return r.Measure(func() error { return accountTx(ctx, r.PG, r.Env, nil) })
	}})
}

// accountTx is the transaction of the pg-tx group on pool.
func accountTx(ctx context.Context, pool *pgxpool.Pool, e *Env, check func(context.Context, pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if check != nil {
		if err := check(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, e.accountUpdate, int64(1)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// sortedRTCases orders the cases by store (Redis first), operation and
// library (fencekit first, then the peers, then plain commands).
func sortedRTCases() []RTCase {
	opRank := map[string]int{}
	for i, op := range []string{"acquire (free)", "acquire (held)", "extend", "release", "write", "write (stale, refused)", "read", "transaction"} {
		opRank[op] = i
	}
	libRank := func(lib string) int {
		switch {
		case strings.HasPrefix(lib, "fencekit"), strings.HasPrefix(lib, "Guard"):
			return 0
		case lib == "bsm/redislock":
			return 1
		case lib == "go-redsync":
			return 2
		}
		return 3
	}
	out := append([]RTCase(nil), rtCases...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Store != b.Store {
			return a.Store == "Redis"
		}
		if opRank[a.Op] != opRank[b.Op] {
			return opRank[a.Op] < opRank[b.Op]
		}
		return libRank(a.Lib) < libRank(b.Lib)
	})
	return out
}

// TrimmedMean is the mean of the lowest share of xs (0 < share <= 1): the
// server's time per command is counted in whole microseconds of wall time,
// so a mean is needed for resolution, and the slowest runs, where the
// server was preempted by another process, are left out.
func TrimmedMean(xs []float64, share float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	v := slices.Clone(xs)
	slices.Sort(v)
	n := max(int(math.Round(share*float64(len(v)))), 1)
	var sum float64
	for _, x := range v[:n] {
		sum += x
	}
	return sum / float64(n)
}
