package suite

import (
	"context"
	"database/sql"
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
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/lock"
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

	mu   sync.Mutex
	sigs map[string]int // Redis commands sent while enabled, by signature
}

func (c *Counter) sent(cmd goredis.Cmder) {
	c.mu.Lock()
	if c.sigs == nil {
		c.sigs = map[string]int{}
	}
	c.sigs[Signature(argStrings(cmd.Args()))]++
	c.mu.Unlock()
}

func (c *Counter) takeSigs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.sigs
	c.sigs = nil
	return n
}

// argStrings renders a command's arguments as the server receives them.
func argStrings(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = v
		case []byte:
			out[i] = string(v)
		case int:
			out[i] = strconv.Itoa(v)
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case float64:
			out[i] = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

// Signature identifies a command by its arguments, the way SLOWLOG keeps
// them: at most 32 arguments, each cut to 128 bytes, the name lower-cased.
func Signature(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i == 32 {
			break
		}
		if i == 0 {
			a = strings.ToLower(a)
		}
		if len(a) > 128 {
			a = a[:128]
		}
		b.WriteString(strconv.Itoa(len(a)))
		b.WriteByte(':')
		b.WriteString(a)
	}
	return b.String()
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
			h.c.sent(cmd)
		}
		return next(ctx, cmd)
	}
}

func (h redisHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if h.c.on.Load() {
			h.c.commands.Add(int64(len(cmds)))
			for _, c := range cmds {
				h.c.sent(c)
			}
		}
		return next(ctx, cmds)
	}
}

// pgTracer counts statements (Begin and Commit included, and each statement
// of a batch).
type pgTracer struct{ c *Counter }

func (t pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if t.c.on.Load() {
		t.c.commands.Add(1)
	}
	return ctx
}

func (pgTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart is part of pgx.BatchTracer: the statements of a batch
// are counted one by one in TraceBatchQuery.
func (pgTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery counts one statement of a batch.
func (t pgTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	if t.c.on.Load() {
		t.c.commands.Add(1)
	}
}

// TraceBatchEnd is part of pgx.BatchTracer.
func (pgTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// RTEnv is what a round-trip case runs on: clients with one connection each,
// every byte of which is counted.
type RTEnv struct {
	*Env
	Redis *goredis.Client
	PG    *pgxpool.Pool
	MySQL *sql.DB // nil without MySQL (rt_mysql.go)

	counter *Counter
	runs    int
	elapsed time.Duration // inside Measure, over the counted runs
}

// Measure counts the round trips of fn. A case calls it exactly once per
// run, around the operation it reports; what it does before and after
// (taking a lock so that it can release it, say) is not counted.
func (r *RTEnv) Measure(fn func() error) error {
	r.counter.takeSigs()
	r.counter.on.Store(true)
	start := time.Now()
	err := fn()
	r.elapsed += time.Since(start)
	r.counter.on.Store(false)
	r.runs++
	r.counter.takeSigs()
	return err
}

// RTCase is one operation whose round trips are counted.
type RTCase struct {
	Store string // "Redis", "PostgreSQL" or "MariaDB"
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
	Commands       float64 // commands (Redis) or statements (PostgreSQL, MariaDB)
	// ServerUsec is NaN: the server's time per operation is measured, paired
	// with floors, by MeasureServerCost instead.
	ServerUsec float64
	// Micros is the mean client-side time of one operation, in
	// microseconds: noisy, compare it only with a baseline of the same run.
	Micros float64
	// Unsupported, when set, says that the backend lacks the capability
	// the case needs (lock.ErrUnsupported: a permit case on an adapter
	// whose Acquire refuses permit kinds); nothing was counted, and it is no
	// error.
	Unsupported string
	Err         error
}

// RTRuns is how many times each operation is counted (after one warm-up run
// that loads scripts and prepares statements).
const RTRuns = 20

// MeasureRoundTrips counts every round-trip case that env's servers allow.
func MeasureRoundTrips(ctx context.Context, env *Env) ([]RTResult, error) {
	return MeasureRoundTripsOf(ctx, env, nil)
}

// MeasureRoundTripsOf counts the round-trip cases for which keep returns
// true (every case when keep is nil) that env's servers allow.
func MeasureRoundTripsOf(ctx context.Context, env *Env, keep func(store, op, lib string) bool) ([]RTResult, error) {
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
	my, err := openMySQLCounted(env, counter)
	if err != nil {
		return nil, err
	}
	if my != nil {
		r.MySQL = my
		defer my.Close()
	}
	var out []RTResult
	for _, c := range sortedRTCases() {
		if (c.Store == "Redis" && r.Redis == nil) || (c.Store == "PostgreSQL" && r.PG == nil) || (c.Store == "MariaDB" && r.MySQL == nil) {
			continue
		}
		if keep != nil && !keep(c.Store, c.Op, c.Lib) {
			continue
		}
		out = append(out, measureCase(ctx, r, c))
	}
	return out, nil
}

// measureCase counts c on r: one warm-up run, then RTRuns counted runs. A
// case whose backend lacks the capability it needs (an error matching
// lock.ErrUnsupported on the warm-up) is reported Unsupported, not failed.
func measureCase(ctx context.Context, r *RTEnv, c RTCase) RTResult {
	res := RTResult{Store: c.Store, Op: c.Op, Lib: c.Lib}
	// Warm-up: scripts loaded (EVALSHA would otherwise miss once),
	// statements prepared, connection dialled.
	r.runs = 0
	if err := c.Run(ctx, r); err != nil {
		if errors.Is(err, lock.ErrUnsupported) {
			res.Unsupported = err.Error()
		} else {
			res.Err = err
		}
		return res
	}
	r.counter.turns.Store(0)
	r.counter.commands.Store(0)
	r.runs = 0
	r.elapsed = 0
	for i := 0; i < RTRuns && res.Err == nil; i++ {
		res.Err = c.Run(ctx, r)
	}
	if res.Err == nil && r.runs != RTRuns {
		res.Err = fmt.Errorf("round-trip case %s/%s measured %d times in %d runs", c.Lib, c.Op, r.runs, RTRuns)
	}
	res.RoundTrips = float64(r.counter.turns.Load()) / RTRuns
	res.Commands = float64(r.counter.commands.Load()) / RTRuns
	if c.Store == "MariaDB" {
		// Parameters are interpolated (openMySQLCounted): a statement is
		// one round trip.
		res.Commands = res.RoundTrips
	}
	res.ServerUsec = math.NaN()
	res.Micros = float64(r.elapsed.Microseconds()) / RTRuns
	return res
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
	for i, op := range []string{"acquire (free)", "acquire (held)", "extend", "release", "write", "write (stale, refused)", "read", "transaction", OpSetOf2, OpExtendRS, OpResume, OpLockCycle, OpSemaphore, OpReadPermit, OpWritePermit} {
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

// TrimmedMean is the mean of the lowest share of xs (0 < share <= 1).
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
