// Command scriptcost measures how long Redis takes to execute fencekit's
// acquire and put scripts and pieces of them, next to the floors of
// benchtable's server-time table and redislock's obtain script: each variant
// runs as EVALSHA, one call at a time, on a throwaway redis-server, and INFO
// commandstats gives the server's microseconds per call (median, lowest and
// highest of several series; on a busy machine the lowest is the steadier).
// -baseline names another folder of the scripts (an earlier version, say) to
// measure side by side. It is the bisection behind the analysis in
// docs/benchmarks.md. From bench/:
//
//	go run ./cmd/scriptcost
//	go run ./cmd/scriptcost -baseline /tmp/old-scripts -run acquire
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/bench/internal/servers"
	"github.com/fencekit/fencekit/bench/suite"
)

// redislockObtain is bsm/redislock v0.9.4's obtain script.
const redislockObtain = `
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end

local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end
`

// floorPut is the least a scripted fenced write can do (the floor of
// benchtable's server-time table).
const floorPut = suite.FloorPutLua

// variant is one script body under test: how it is called, and what is
// undone between two calls (outside the measurement) so that every call
// takes the same path.
type variant struct {
	name string
	src  string
	keys []string
	args func(i int) []any
	// reset runs after every call, outside the measurement.
	reset func(ctx context.Context, c *goredis.Client)
}

func main() {
	scripts := flag.String("scripts", "../adapters/redis/scripts", "folder of fencekit's Lua scripts")
	baseline := flag.String("baseline", "", "other folders of the scripts (say, an earlier version), comma-separated, to measure side by side")
	calls := flag.Int("calls", 3000, "calls per series")
	series := flag.Int("series", 5, "series per variant")
	only := flag.String("run", "", "only variants whose name contains this")
	flag.Parse()
	read := func(dir, name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			fatal(err)
		}
		return string(b)
	}
	const owner = "0123456789abcdef0123456789abcdef"
	lease, counter, record := "bench:{k}:lease", "bench:{k}:counter", "bench:{r}"
	value := strings.Repeat("v", 100)
	lockArgs := func(int) []any { return []any{owner, 10000, 604800000, ""} }
	freeLease := func(ctx context.Context, c *goredis.Client) { c.Del(ctx, lease) }
	same := func(int) []any { return []any{"0000000000000000001", value} }
	// Rising tokens near the top of the range whose first ten digits agree.
	rising := func(i int) []any { return []any{fmt.Sprintf("%019d", int64(math.MaxInt64-1<<24)+int64(i)+1), value} }
	clearRecord := func(ctx context.Context, c *goredis.Client) {}
	lock := func(name, src string) variant {
		return variant{name: name, src: src, keys: []string{lease, counter}, args: lockArgs, reset: freeLease}
	}
	variants := []variant{
		lock("return 1", `return 1`),
		lock("HMGET only", `redis.call('HMGET', KEYS[1], 'owner', 'token') return 1`),
		lock("HGET only", `redis.call('HGET', KEYS[1], 'owner') return 1`),
		lock("TIME only", `redis.call('TIME') return 1`),
		lock("TIME + string.format", `local t = redis.call('TIME') local now = string.format('%d%06d', t[1], t[2]) return 1`),
		lock("SET ... PX", `redis.call('SET', KEYS[2], 'x', 'PX', ARGV[3]) return 1`),
		lock("SET ... PX GET", `redis.call('SET', KEYS[2], 'x', 'PX', ARGV[3], 'GET') return 1`),
		lock("HSET + PEXPIRE", `redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', '1234567890123456', 'metadata', ARGV[4]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1`),
		lock("floor acquire: SET NX PX + INCR", `if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end return redis.call('INCR', KEYS[2])`),
		lock("five calls, no logic: HMGET, TIME, SET PX GET, HSET, PEXPIRE", `redis.call('HMGET', KEYS[1], 'owner', 'token') local t = redis.call('TIME') redis.call('SET', KEYS[2], 'x', 'PX', ARGV[3], 'GET') redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', '1234567890123456', 'metadata', ARGV[4]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1`),
		lock("layout floor: the five commands alone", suite.LayoutAcquireLua),
		lock("acquire.lua", read(*scripts, "acquire.lua")),
		{name: "redislock obtain", src: redislockObtain, keys: []string{lease}, args: func(int) []any { return []any{owner, 10, 10000} }, reset: freeLease},
		{name: "floor put (Lua string >), same token", src: floorPut, keys: []string{record}, args: same, reset: clearRecord},
		{name: "floor put (Lua string >), rising token", src: floorPut, keys: []string{record + "r"}, args: rising, reset: clearRecord},
		{name: "put.lua, same token", src: read(*scripts, "compare.lua") + "\n" + read(*scripts, "put.lua"), keys: []string{record + "p"}, args: same, reset: clearRecord},
		{name: "put.lua, rising token", src: read(*scripts, "compare.lua") + "\n" + read(*scripts, "put.lua"), keys: []string{record + "pr"}, args: rising, reset: clearRecord},
	}
	for i, dir := range strings.Split(*baseline, ",") {
		if dir == "" {
			continue
		}
		prelude := func(name string) string {
			src := read(dir, name)
			if strings.Contains(src, "greater(") && !strings.Contains(src, "function greater") {
				src = read(dir, "compare.lua") + "\n" + src
			}
			return src
		}
		label, rec := filepath.Base(dir), fmt.Sprintf("%sb%d", record, i)
		variants = append(variants,
			lock(label+" acquire.lua", prelude("acquire.lua")),
			variant{name: label + " put.lua, same token", src: prelude("put.lua"), keys: []string{rec}, args: same, reset: clearRecord},
			variant{name: label + " put.lua, rising token", src: prelude("put.lua"), keys: []string{rec + "r"}, args: rising, reset: clearRecord},
		)
	}
	if *only != "" {
		var keep []variant
		for _, v := range variants {
			if strings.Contains(v.name, *only) {
				keep = append(keep, v)
			}
		}
		variants = keep
	}

	srv, err := servers.StartRedis()
	if err != nil {
		fatal(err)
	}
	defer srv.Stop()
	stop = srv.Stop
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 1})
	defer c.Close()
	results := map[string][]float64{}
	for s := 0; s < *series; s++ {
		for _, v := range variants {
			script := goredis.NewScript(v.src)
			if err := script.Load(ctx, c).Err(); err != nil {
				fatal(fmt.Errorf("%s: %w", v.name, err))
			}
			c.Del(ctx, lease, counter)
			for _, k := range v.keys {
				c.Del(ctx, k)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				fatal(err)
			}
			for i := 0; i < *calls; i++ {
				err := script.EvalSha(ctx, c, v.keys, v.args(i)...).Err()
				if err != nil && err != goredis.Nil {
					fatal(fmt.Errorf("%s: %w", v.name, err))
				}
				v.reset(ctx, c)
			}
			usec, n, err := evalshaStats(ctx, c)
			if err != nil {
				fatal(err)
			}
			results[v.name] = append(results[v.name], usec/float64(n))
		}
	}
	fmt.Printf("| script body | µs per EVALSHA (median of %d series of %d calls) | range |\n|---|---:|---:|\n", *series, *calls)
	for _, v := range variants {
		r := results[v.name]
		sort.Float64s(r)
		fmt.Printf("| %s | %.2f | %.2f–%.2f |\n", v.name, r[len(r)/2], r[0], r[len(r)-1])
	}
}

// evalshaStats returns the usec and calls INFO commandstats charges to
// EVALSHA since the last CONFIG RESETSTAT.
func evalshaStats(ctx context.Context, c *goredis.Client) (float64, int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		var usec float64
		var calls int64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if calls > 0 {
			return usec, calls, nil
		}
	}
	return 0, 0, fmt.Errorf("INFO commandstats has no evalsha")
}

// stop ends the server before a fatal exit.
var stop = func() {}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "scriptcost:", err)
	stop()
	os.Exit(1)
}
