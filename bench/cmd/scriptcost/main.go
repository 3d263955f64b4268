// Command scriptcost measures how long Redis takes to execute fencekit's
// acquire script and pieces of it, next to redislock's obtain script: each
// variant runs as EVALSHA, one call at a time, on a throwaway redis-server,
// and INFO commandstats gives the server's microseconds per call (median of
// several series). It is the bisection behind the analysis in
// docs/benchmarks.md. From bench/:
//
//	go run ./cmd/scriptcost
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/bench/internal/servers"
)

// redislockObtain is bsm/redislock v0.9.4's obtain script.
const redislockObtain = `
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end

local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end
`

func main() {
	scripts := flag.String("scripts", "../adapters/redis/scripts", "folder of fencekit's Lua scripts")
	calls := flag.Int("calls", 3000, "calls per series")
	series := flag.Int("series", 5, "series per variant")
	flag.Parse()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(*scripts, name))
		if err != nil {
			fatal(err)
		}
		return string(b)
	}
	compare := read("compare.lua")
	variants := []struct{ name, src string }{
		{"return 1", `return 1`},
		{"HMGET only", `redis.call('HMGET', KEYS[1], 'owner', 'token') return 1`},
		{"TIME only", `redis.call('TIME') return 1`},
		{"TIME + string.format", `local t = redis.call('TIME') local now = t[1] .. string.format('%06d', tonumber(t[2])) return 1`},
		{"SET ... PX", `redis.call('SET', KEYS[2], 'x', 'PX', ARGV[3]) return 1`},
		{"SET + PEXPIRE", `redis.call('SET', KEYS[2], 'x') redis.call('PEXPIRE', KEYS[2], ARGV[3]) return 1`},
		{"HSET + PEXPIRE", `redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', '1234567890123456') redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1`},
		{"DEL + HSET + PEXPIRE", `redis.call('DEL', KEYS[1]) redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', '1234567890123456') redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1`},
		{"acquire.lua", compare + "\n" + read("acquire.lua")},
		{"redislock obtain", redislockObtain},
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
	const owner = "0123456789abcdef0123456789abcdef"
	lease, counter := "bench:{k}:lease", "bench:{k}:counter"
	results := map[string][]float64{}
	for s := 0; s < *series; s++ {
		for _, v := range variants {
			script := goredis.NewScript(v.src)
			if err := script.Load(ctx, c).Err(); err != nil {
				fatal(fmt.Errorf("%s: %w", v.name, err))
			}
			c.Del(ctx, lease, counter)
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				fatal(err)
			}
			for i := 0; i < *calls; i++ {
				var err error
				if v.name == "redislock obtain" {
					err = script.EvalSha(ctx, c, []string{lease}, owner, 10, 10000).Err()
				} else {
					err = script.EvalSha(ctx, c, []string{lease, counter}, owner, 10000, 604800000).Err()
				}
				if err != nil && err != goredis.Nil {
					fatal(fmt.Errorf("%s: %w", v.name, err))
				}
				c.Del(ctx, lease) // free again: every call takes the common path
			}
			usec, n, err := evalshaStats(ctx, c)
			if err != nil {
				fatal(err)
			}
			results[v.name] = append(results[v.name], usec/float64(n))
		}
	}
	fmt.Printf("| script body | µs per EVALSHA (median of %d series of %d calls) |\n|---|---:|\n", *series, *calls)
	for _, v := range variants {
		r := results[v.name]
		sort.Float64s(r)
		fmt.Printf("| %s | %.2f |\n", v.name, r[len(r)/2])
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
