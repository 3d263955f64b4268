package suite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Server time per operation against floors: what Redis's one thread spends
// on each fencekit operation, next to the least a script doing the same job
// can cost, all measured in one run on one server with the SLOWLOG at
// threshold 0. A script's inner commands are not logged (only the EVALSHA
// that ran them), so nothing counts twice. Redis times each command in whole
// microseconds of wall time: every case runs many times, interleaved with
// the others one operation at a time (so that a busy moment of the machine
// falls on all of them alike), and each command's durations are averaged
// over their fastest 90% (the slowest, where another process preempted the
// server, are left out).

// Floor scripts: the least a script can do for each job.
const (
	// FloorPutLua is the least a scripted fenced write can do: read the
	// fence, compare, write value and fence. Its comparison is Lua's string
	// `>`, which is exact for equal-width decimals only in locales that
	// order digits by code point, and costs one operator.
	FloorPutLua = `local f = redis.call('HGET', KEYS[1], 'fence')
if f and f > ARGV[1] then return {'stale', f} end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return {'ok'}`
	// FloorAcquireLua is the least a scripted fenced lock can do: SET NX PX
	// and, when taken, INCR a counter for the token.
	FloorAcquireLua = `if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('INCR', KEYS[2])`
	// CompareAndDeleteLua is the usual release: delete the key only while it
	// holds the caller's value.
	CompareAndDeleteLua = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`
	// LayoutAcquireLua is the commands fencekit's acquire needs on its
	// common path with its key layout (a lease hash, which cannot carry its
	// own expiry, a counter, and the server clock), and nothing else: no
	// comparison, no branch. With LayoutReleaseLua it is the floor of that
	// layout.
	LayoutAcquireLua = `redis.call('HGET', KEYS[1], 'owner')
local t = redis.call('TIME')
local token = t[1] .. t[2]
redis.call('SET', KEYS[2], token, 'PX', ARGV[3], 'GET')
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'metadata', '')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token`
	// LayoutReleaseLua is compare-and-delete on the lease hash's owner.
	LayoutReleaseLua = `if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`
)

var (
	floorPut     = goredis.NewScript(FloorPutLua)
	floorAcquire = goredis.NewScript(FloorAcquireLua)
	casDelete    = goredis.NewScript(CompareAndDeleteLua)
	layoutAcq    = goredis.NewScript(LayoutAcquireLua)
	layoutRel    = goredis.NewScript(LayoutReleaseLua)
)

// CostCase is one operation whose server time is measured.
type CostCase struct {
	Job   string // "fenced write" or "lock cycle": rows of a job compare with its floor
	Name  string
	Floor bool // the job's floor
	// Ref marks a reference row (plain SET, unfenced locks): shown, and
	// compared with the floor, but no target.
	Ref bool
	// New prepares the case on c; the returned op is run once per run i
	// (from 0), and every command it sends is counted.
	New func(ctx context.Context, e *Env, c *goredis.Client) (func(ctx context.Context, i int) error, error)
}

// CostCases are the cases of the server-time table, in table order.
func CostCases() []CostCase {
	owner := strings.Repeat("a", 32) // the length of lock.NewOwner's
	return []CostCase{
		{Job: "fenced write", Name: "floor: HGET, compare, HSET in one script", Floor: true,
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				key := e.Key("cost", "floorput")
				return func(ctx context.Context, _ int) error {
					v, err := floorPut.EvalSha(ctx, c, []string{key}, "0000000000000000001", e.Value).Slice()
					if err == nil && (len(v) != 1 || v[0] != "ok") {
						err = fmt.Errorf("floor put: %v: %w", v, errUnexpected)
					}
					return err
				}, loadScripts(ctx, c, floorPut)
			}},
		{Job: "fenced write", Name: "fencekit Store.Put, same token",
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				s, key := fenceredis.NewStore(c, nil), e.Key("cost", "put")
				return func(ctx context.Context, _ int) error { return s.Put(ctx, key, 1, e.Value) }, s.Put(ctx, key, 1, e.Value)
			}},
		{Job: "fenced write", Name: "fencekit Store.Put, rising token", New: risingPut("putrise", 1_764_000_000_000_000)},
		{Job: "fenced write", Name: "fencekit Store.Put, rising token near 2^63 (worst case)", New: risingPut("putworst", math.MaxInt64-1<<24)},
		{Job: "fenced write", Name: "plain SET (no fence)", Ref: true,
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				key := e.Key("cost", "set")
				return func(ctx context.Context, _ int) error { return c.Set(ctx, key, e.Value, 0).Err() }, nil
			}},
		{Job: "lock cycle", Name: "floor: SET NX PX + INCR script, compare-and-delete script", Floor: true,
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				keys := []string{e.Key("cost", "floorlock"), e.Key("cost", "floorlock", "counter")}
				return func(ctx context.Context, _ int) error {
					if err := floorAcquire.EvalSha(ctx, c, keys, owner, TTL.Milliseconds()).Err(); err != nil {
						return err
					}
					return releaseCAS(ctx, c, keys[0], owner)
				}, loadScripts(ctx, c, floorAcquire, casDelete)
			}},
		{Job: "lock cycle", Name: "fencekit Backend Acquire + Release",
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				b, name := fenceredis.NewBackend(c, nil), e.Key("cost", "lock")
				o, err := lock.NewOwner()
				if err != nil {
					return nil, err
				}
				req := driver.Request{Name: name, Owner: o, TTL: TTL, Kind: driver.Exclusive}
				claim := driver.Claim{Name: name, Owner: o, Kind: driver.Exclusive}
				cycle := func(ctx context.Context, _ int) error {
					if _, err := b.Acquire(ctx, req); err != nil {
						return err
					}
					return b.Release(ctx, claim)
				}
				return cycle, cycle(ctx, 0)
			}},
		{Job: "lock cycle", Name: "layout floor: fencekit's five commands alone, then HGET + DEL", Ref: true,
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				keys := []string{e.Key("cost", "layout", "lease"), e.Key("cost", "layout", "counter")}
				return func(ctx context.Context, _ int) error {
					if err := layoutAcq.EvalSha(ctx, c, keys, owner, TTL.Milliseconds(), (7 * 24 * time.Hour).Milliseconds()).Err(); err != nil {
						return err
					}
					n, err := layoutRel.EvalSha(ctx, c, keys[:1], owner).Int64()
					if err == nil && n != 1 {
						err = fmt.Errorf("layout release: %d: %w", n, errUnexpected)
					}
					return err
				}, loadScripts(ctx, c, layoutAcq, layoutRel)
			}},
		{Job: "lock cycle", Name: "unfenced lock: SET NX PX, compare-and-delete script", Ref: true,
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				key := e.Key("cost", "unfenced")
				return func(ctx context.Context, _ int) error {
					ok, err := c.SetNX(ctx, key, owner, TTL).Result()
					if err == nil && !ok {
						err = fmt.Errorf("unfenced lock not taken: %w", errUnexpected)
					}
					if err != nil {
						return err
					}
					return releaseCAS(ctx, c, key, owner)
				}, loadScripts(ctx, c, casDelete)
			}},
		{Job: "lock cycle", Name: "bsm/redislock Obtain + Release", Ref: true,
			New: func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
				rl, key := redislock.New(c), e.Key("cost", "redislock")
				cycle := func(ctx context.Context, _ int) error {
					l, err := rl.Obtain(ctx, key, TTL, nil)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
				return cycle, cycle(ctx, 0)
			}},
	}
}

// risingPut offers a token one above the last at every run, from base.
// Tokens the size of the Redis backend's (server time in µs, 16 digits) are
// decided by the comparison's first step; tokens one apart near 2^63 tie as
// doubles and share their first ten digits, the comparison's longest path.
func risingPut(name string, base fence.Token) func(context.Context, *Env, *goredis.Client) (func(context.Context, int) error, error) {
	return func(ctx context.Context, e *Env, c *goredis.Client) (func(context.Context, int) error, error) {
		s, key := fenceredis.NewStore(c, nil), e.Key("cost", name)
		if err := c.Del(ctx, s.Key(key)).Err(); err != nil { // a fresh fence for every repeat
			return nil, err
		}
		return func(ctx context.Context, i int) error { return s.Put(ctx, key, base+fence.Token(i)+1, e.Value) },
			s.Put(ctx, key, base, e.Value)
	}
}

func releaseCAS(ctx context.Context, c *goredis.Client, key, owner string) error {
	n, err := casDelete.EvalSha(ctx, c, []string{key}, owner).Int64()
	if err == nil && n != 1 {
		err = fmt.Errorf("compare-and-delete of %q: %d: %w", key, n, errUnexpected)
	}
	return err
}

func loadScripts(ctx context.Context, c *goredis.Client, ss ...*goredis.Script) error {
	for _, s := range ss {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// CostResult is the server time of one CostCase.
type CostResult struct {
	Job, Name  string
	Floor, Ref bool
	// Usec is the server's execution time per operation, in µs.
	Usec float64
	// Commands is how many commands one operation sends.
	Commands float64
	Err      error
}

// costBatch is how many runs of every case go between two SLOWLOG reads;
// the log holds costBatch × (commands of all cases) entries.
const costBatch = 250

// MeasureServerCost runs every CostCase runs times, interleaved, on a Redis
// of env's own (it reconfigures the SLOWLOG), and returns each case's server
// time per operation.
func MeasureServerCost(ctx context.Context, env *Env, runs int) ([]CostResult, error) {
	if env.Redis == nil || !env.RedisOwned {
		return nil, errors.New("server cost needs a throwaway Redis of the run's own")
	}
	counter := &Counter{}
	c := goredis.NewClient(&goredis.Options{Addr: env.RedisAddr, PoolSize: 1, ConnMaxIdleTime: -1})
	c.AddHook(redisHook{counter})
	defer c.Close()
	admin := env.Redis

	cases := CostCases()
	ops := make([]func(context.Context, int) error, len(cases))
	res := make([]CostResult, len(cases))
	for i, cc := range cases {
		res[i] = CostResult{Job: cc.Job, Name: cc.Name, Floor: cc.Floor, Ref: cc.Ref}
		ops[i], res[i].Err = cc.New(ctx, env, c)
	}

	cfg := map[string]string{}
	for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
		v, err := admin.ConfigGet(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		cfg[k] = v[k]
	}
	defer func() {
		for k, v := range cfg {
			admin.ConfigSet(ctx, k, v)
		}
	}()
	if err := admin.ConfigSet(ctx, "slowlog-max-len", strconv.Itoa(costBatch*8*len(cases))).Err(); err != nil {
		return nil, err
	}

	// durations[i][class] are case i's logged durations per command class
	// (the command name, or EVALSHA and its digest); sent[i][class] counts
	// what case i sent.
	durations := make([]map[string][]float64, len(cases))
	sent := make([]map[string]int, len(cases))
	for i := range cases {
		durations[i], sent[i] = map[string][]float64{}, map[string]int{}
	}
	owner := map[string]int{} // command signature -> case
	for done := 0; done < runs; done += costBatch {
		n := min(costBatch, runs-done)
		if err := admin.SlowLogReset(ctx).Err(); err != nil {
			return nil, err
		}
		if err := admin.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
			return nil, err
		}
		for k := 0; k < n; k++ {
			for i := range cases {
				if res[i].Err != nil {
					continue
				}
				counter.takeSigs()
				counter.on.Store(true)
				err := ops[i](ctx, done+k)
				counter.on.Store(false)
				for sig, m := range counter.takeSigs() {
					owner[sig] = i
					sent[i][commandClass(sigArgs(sig))] += m
				}
				if err != nil {
					res[i].Err = err
				}
			}
		}
		if err := admin.ConfigSet(ctx, "slowlog-log-slower-than", cfg["slowlog-log-slower-than"]).Err(); err != nil {
			return nil, err
		}
		entries, err := admin.SlowLogGet(ctx, -1).Result()
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if i, ok := owner[Signature(e.Args)]; ok {
				cl := commandClass(e.Args)
				durations[i][cl] = append(durations[i][cl], float64(e.Duration.Nanoseconds())/1e3)
			}
		}
		clear(owner)
	}
	for i := range res {
		if res[i].Err != nil {
			continue
		}
		var usec, cmds float64
		for cl, m := range sent[i] {
			d := durations[i][cl]
			if len(d) != m {
				res[i].Err = fmt.Errorf("%s: %d %s sent, %d in the SLOWLOG", res[i].Name, m, cl, len(d))
				break
			}
			usec += TrimmedMean(d, 0.9) * float64(m) / float64(runs)
			cmds += float64(m) / float64(runs)
		}
		res[i].Usec, res[i].Commands = usec, cmds
	}
	return res, nil
}

// commandClass names a command for averaging: its name, and for EVALSHA the
// script's digest, so that two scripts never share a mean.
func commandClass(args []string) string {
	if len(args) == 0 {
		return ""
	}
	name := strings.ToLower(args[0])
	if (name == "evalsha" || name == "eval") && len(args) > 1 {
		return name + " " + args[1]
	}
	return name
}

// sigArgs turns a Signature back into its arguments.
func sigArgs(sig string) []string {
	var out []string
	for sig != "" {
		n, rest, ok := strings.Cut(sig, ":")
		if !ok {
			break
		}
		l, err := strconv.Atoi(n)
		if err != nil || l > len(rest) {
			break
		}
		out = append(out, rest[:l])
		sig = rest[l:]
	}
	return out
}
