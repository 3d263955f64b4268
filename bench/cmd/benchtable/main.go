// Command benchtable runs fencekit's side-by-side benchmarks (bench/suite)
// in interleaved rounds, counts round trips and Redis memory per lock, and
// writes the tables, targets and a plot into docs/benchmarks.md and
// docs/benchmarks.svg. From the repository root:
//
//	cd bench && go run ./cmd/benchtable -out ../docs/benchmarks.md
//
// It starts a throwaway redis-server and PostgreSQL (initdb) of its own on
// free loopback ports and stops them at the end, unless -redis-addr or
// -pg-url name servers to use (a named Redis is never flushed, and the
// memory measurement is then skipped).
//
// Every round runs every case once, in the same order, so that the rows of a
// group are measured minutes apart at most and under the same load; a row's
// ratio to its baseline is the median over rounds of the same-round ratios.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/bench/report"
	"github.com/fencekit/fencekit/bench/suite"
)

// targets are the goals of issues 6 and 12 on the side-by-side groups,
// reported and never asserted. A throughput goal "≥ x× the peer's" is a
// time-per-operation ratio ≤ 1/x.
var targets = []report.Target{
	{Name: "lock cycle throughput (Client) ≥ 0.95× bsm/redislock's, 32 goroutines (time ≤ 1.053×)", Group: "redis-cycle-32", Row: "fencekit Client", Metric: "time", Limit: 1 / 0.95},
	{Name: "lock cycle throughput (Backend) ≥ 0.95× bsm/redislock's, 32 goroutines (time ≤ 1.053×)", Group: "redis-cycle-32", Row: "fencekit Backend", Metric: "time", Limit: 1 / 0.95},
	{Name: "fenced Put throughput ≥ 0.8× plain SET's, 32 goroutines (time ≤ 1.25×)", Group: "redis-write-32", Row: "fencekit Store.Put", Metric: "time", Limit: 1 / 0.8},
	{Name: "fenced acquire+release (Client) ≤ 1.05× bsm/redislock, 1 goroutine", Group: "redis-cycle-1", Row: "fencekit Client", Metric: "time", Limit: 1.05},
	{Name: "fenced acquire+release (Backend) ≤ 1.05× bsm/redislock, 1 goroutine", Group: "redis-cycle-1", Row: "fencekit Backend", Metric: "time", Limit: 1.05},
	{Name: "fenced Put ≤ 1.15× plain SET, 1 goroutine", Group: "redis-write-1", Row: "fencekit Store.Put", Metric: "time", Limit: 1.15},
	{Name: "PostgreSQL fenced upsert ≤ 1.10× plain upsert, 1 goroutine", Group: "pg-write-1", Row: "fencekit Store.Put", Metric: "time", Limit: 1.10},
	{Name: "PostgreSQL fenced upsert ≤ 1.10× plain upsert, 32 goroutines", Group: "pg-write-32", Row: "fencekit Store.Put", Metric: "time", Limit: 1.10},
	{Name: "allocs/op of the fenced cycle (Client) ≤ bsm/redislock's", Group: "redis-cycle-1", Row: "fencekit Client", Metric: "allocs", Limit: 1.0},
	{Name: "allocs/op of the fenced cycle (Backend) ≤ bsm/redislock's", Group: "redis-cycle-1", Row: "fencekit Backend", Metric: "allocs", Limit: 1.0},
}

func main() {
	testing.Init()
	var (
		out       = flag.String("out", "", "markdown file to write (the part between the benchtable markers is replaced); empty: print to stdout")
		svgPath   = flag.String("svg", "", "SVG plot to write; default: benchmarks.svg beside -out")
		runs      = flag.Int("runs", 3, "runs: each starts fresh servers, warms up and measures -rounds rounds; the spread of the runs' medians is reported")
		rounds    = flag.Int("rounds", 7, "rounds per run: every case runs once per round; medians are over all rounds")
		benchtime = flag.Duration("benchtime", 200*time.Millisecond, "time per case per round (testing's -benchtime)")
		run       = flag.String("run", "", "only cases whose group/name matches this regexp")
		redisAddr = flag.String("redis-addr", "", "use this Redis (never flushed) instead of a throwaway redis-server")
		pgURL     = flag.String("pg-url", "", `use this PostgreSQL instead of a throwaway instance; "off" skips PostgreSQL`)
		noRedis   = flag.Bool("no-redis", false, "skip everything on Redis")
		locks     = flag.Int("locks", 100_000, "locks held at once for the Redis memory measurement; 0 skips it")
		skipRT    = flag.Bool("skip-roundtrips", false, "skip counting round trips")
		costRuns  = flag.Int("cost-runs", 2000, "runs of every operation per repeat of the server-time measurement; 0 skips it")
		costReps  = flag.Int("cost-repeats", 3, "repeats of the server-time measurement; ratios are paired within a repeat")
		costOnly  = flag.Bool("cost-only", false, "measure only the server time per operation against the floors, print its table and stop")
	)
	flag.Parse()
	var filter *regexp.Regexp
	if *run != "" {
		var err error
		if filter, err = regexp.Compile(*run); err != nil {
			fatal(err)
		}
	}
	if *svgPath == "" && *out != "" {
		*svgPath = filepath.Join(filepath.Dir(*out), "benchmarks.svg")
	}

	ctx := context.Background()
	started := time.Now()
	loadStart := loadavg()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "benchtable: "+format+"\n", args...) }

	env, err := suite.Setup(ctx, suite.Options{RedisAddr: *redisAddr, PostgresURL: *pgURL, NoRedis: *noRedis, Logf: logf})
	if err != nil {
		fatal(err)
	}
	defer func() { env.Close() }()
	cleanup = func() { env.Close() }
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { // Stop the servers on ^C too.
		<-sig
		env.Close()
		os.Exit(130)
	}()

	var costRows []report.CostRow
	if *costRuns > 0 && env.Redis != nil && env.RedisOwned && (filter == nil || *costOnly) {
		costRows = measureCost(ctx, env, *costRuns, *costReps, logf)
	}
	if *costOnly {
		fmt.Print(report.CostTable(costRows))
		fmt.Print(report.TargetTable(report.EvaluateCost(costTargets, costRows)))
		env.Close()
		return
	}

	// The cases this run can and should measure.
	var cases []suite.Case
	for _, c := range suite.Cases() {
		g, _ := suite.GroupByID(c.Group)
		if (g.Needs == suite.NeedRedis && env.Redis == nil) || (g.Needs == suite.NeedPostgres && env.PG == nil) {
			continue
		}
		if filter != nil && !filter.MatchString(c.ID()) {
			continue
		}
		cases = append(cases, c)
	}
	logf("%d cases × %d runs × %d rounds at %v each", len(cases), *runs, *rounds, *benchtime)

	// The one-goroutine groups on a server are also measured interleaved,
	// operation by operation; their medians replace the per-case ones.
	var interleaved [][]suite.Case
	for _, g := range suite.Groups() {
		if g.Kind != suite.Latency || g.Needs == suite.NeedNothing {
			continue
		}
		var cs []suite.Case
		for _, c := range cases {
			if c.Group == g.ID && c.Op != nil {
				cs = append(cs, c)
			}
		}
		if len(cs) > 1 {
			interleaved = append(interleaved, cs)
		}
	}
	type lat struct {
		round    int
		p50, p90 float64
	}
	latencies := map[string][]lat{}

	samples := map[string][]report.Sample{}
	var errs []string
	for run := 1; run <= *runs; run++ {
		if run > 1 {
			// A run of its own: fresh servers, fresh connections, fresh
			// caches, so that the spread over runs is what a rerun sees.
			env.Close()
			if env, err = suite.Setup(ctx, suite.Options{RedisAddr: *redisAddr, PostgresURL: *pgURL, NoRedis: *noRedis, Logf: logf}); err != nil {
				fatal(err)
			}
		}
		// A warm-up pass, discarded: connections dialled, scripts cached,
		// statements prepared on every pooled connection, tables' pages warm.
		if err := flag.Set("test.benchtime", (*benchtime / 8).String()); err != nil {
			fatal(err)
		}
		for _, c := range cases {
			_, _ = measure(env, c, 0)
		}
		if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
			fatal(err)
		}
		logf("run %d/%d: warm-up done", run, *runs)
		for k := 1; k <= *rounds; k++ {
			r := (run-1)*(*rounds) + k
			roundStart := time.Now()
			// Odd rounds go forward, even rounds backward, so that no row is
			// always measured right after the same other one.
			order := append([]suite.Case(nil), cases...)
			if r%2 == 0 {
				slices.Reverse(order)
			}
			for _, c := range order {
				s, err := measure(env, c, r)
				if err != nil {
					msg := fmt.Sprintf("round %d, %s: %v", r, c.ID(), err)
					logf("%s", msg)
					errs = append(errs, msg)
					continue
				}
				s.Run = run
				samples[c.ID()] = append(samples[c.ID()], s)
			}
			for _, cs := range interleaved {
				res, err := env.Interleave(cs, *benchtime)
				if err != nil {
					msg := fmt.Sprintf("round %d, interleaved %s: %v", r, cs[0].Group, err)
					logf("%s", msg)
					errs = append(errs, msg)
					continue
				}
				for id, l := range res {
					latencies[id] = append(latencies[id], lat{round: r, p50: float64(l.P50), p90: float64(l.P90)})
				}
			}
			logf("run %d/%d, round %d/%d done in %v", run, *runs, k, *rounds, time.Since(roundStart).Round(time.Second))
		}
	}

	for id, ls := range latencies {
		for _, l := range ls {
			for i := range samples[id] {
				if samples[id][i].Round == l.round {
					if samples[id][i].Extra == nil {
						samples[id][i].Extra = map[string]float64{}
					}
					samples[id][i].Extra[report.MetricP50] = l.p50
					samples[id][i].Extra[report.MetricP90] = l.p90
				}
			}
		}
	}

	var summaries []report.GroupSummary
	for _, g := range suite.Groups() {
		rg := report.Group{ID: g.ID, Title: g.Title, Note: g.Note, Kind: report.Kind(g.Kind), NoPlot: g.NoPlot}
		for _, c := range cases {
			if c.Group == g.ID && len(samples[c.ID()]) > 0 {
				rg.Rows = append(rg.Rows, report.Row{Name: c.Name, Baseline: c.Baseline, Samples: samples[c.ID()]})
			}
		}
		if len(rg.Rows) > 0 {
			summaries = append(summaries, report.Summarize(rg))
		}
	}

	var rt []report.RTRow
	if !*skipRT && filter == nil {
		logf("counting round trips")
		res, err := suite.MeasureRoundTrips(ctx, env)
		if err != nil {
			errs = append(errs, "round trips: "+err.Error())
		}
		for _, r := range res {
			if r.Unsupported != "" { // a permit case on an adapter without permits yet
				logf("round trips %s/%s: %s", r.Lib, r.Op, r.Unsupported)
				continue
			}
			row := report.RTRow{Store: r.Store, Op: r.Op, Lib: r.Lib, RoundTrips: r.RoundTrips, Commands: r.Commands, ServerUsec: r.ServerUsec}
			if r.Err != nil {
				row.Err = r.Err.Error()
				errs = append(errs, fmt.Sprintf("round trips %s/%s: %v", r.Lib, r.Op, r.Err))
			}
			rt = append(rt, row)
		}
	}

	var mem []report.MemRow
	memNote := ""
	switch {
	case *locks <= 0 || filter != nil || env.Redis == nil:
	case !env.RedisOwned:
		memNote = "Skipped: -redis-addr names a shared server, and this measurement flushes its server."
	default:
		logf("holding %d locks per library for the memory measurement", *locks)
		res, err := suite.MeasureMemory(ctx, env, *locks)
		if err != nil {
			errs = append(errs, "memory: "+err.Error())
		}
		for _, m := range res {
			row := report.MemRow{Lib: m.Lib, Locks: m.Locks, KeysPerLock: m.KeysPerLock, UsagePerLock: m.UsagePerLock,
				Delta: m.DeltaPerLock, IdleKeys: m.IdleKeysPerLock, IdleUsage: m.IdleUsagePerLock, IdleDelta: m.IdleDeltaPerLock}
			if m.Err != nil {
				row.Err = m.Err.Error()
				errs = append(errs, fmt.Sprintf("memory %s: %v", m.Lib, m.Err))
			}
			mem = append(mem, row)
		}
		memNote = fmt.Sprintf("%s locks held at once per library (TTL 10 min) on the run's own redis-server, flushed in between. "+
			"MEMORY USAGE (SAMPLES 0, exact) sums a lock's keys, averaged over %d locks; the used_memory delta also counts "+
			"the keyspace and expiry dictionaries (and their power-of-two growth). \"Released\" is after every lock was released again.",
			report.FormatRate(float64(*locks)), min(*locks, 1000))
	}

	doc := report.Doc{
		Command: command(),
		Machine: machine(ctx, env, loadStart),
		Settings: fmt.Sprintf("%[4]d runs of %[1]d rounds; each run starts its own servers and makes one discarded warm-up pass, then every case runs once per round for about %[2]v (testing.Benchmark). "+
			"A round runs the cases in the order of the tables, the next round in the reverse order, so the rows of a group are always measured "+
			"within seconds of each other. In the one-goroutine groups on a server, every round also runs the rows' operations interleaved, "+
			"one operation of each in turn, for about %[2]v per row; their median latency and p90 come from that loop, which gives every row the same moments of the machine. "+
			"\"× baseline\" is the median over rounds of the same-round ratio (of median latency for the one-goroutine groups, of time per operation for the 32-goroutine ones, "+
			"of acquisitions per second under contention), pooled over all runs; \"ratio range\" is its lowest and highest round, and \"runs\" the lowest and highest of the runs' own medians: "+
			"what a rerun of this command can be expected to show. "+
			"The whole command took %[3]v.", *rounds, *benchtime, time.Since(started).Round(time.Second), *runs),
		Targets: append(report.EvaluateCost(costTargets, costRows), report.Evaluate(targets, summaries)...),
		Cost:    costRows,
		CostNote: fmt.Sprintf("Redis executes commands on one thread, so the server time of an operation decides how many of them a whole fleet gets per second once Redis is saturated. "+
			"Measured on the run's own redis-server with the SLOWLOG at threshold 0: every row runs %d times per repeat, the rows interleaved one operation at a time, "+
			"and each command's logged durations (whole microseconds of wall time) are averaged over their fastest 90%%; a script's inner commands are inside its EVALSHA, so nothing counts twice. "+
			"The floors are the least a script can do for the job: for a fenced write one script doing HGET, a comparison (Lua's string `>`) and HSET; "+
			"for a fenced lock a script doing SET NX PX then INCR for the token, and a compare-and-delete script. \"× floor\" and \"× ...\" are medians over %d repeats of the ratio within a repeat, with the lowest and highest.",
			*costRuns, *costReps),
		Groups: summaries,
		RT:     rt,
		RTNote: fmt.Sprintf("Counted, not estimated: each client has one connection whose reads and writes are wrapped; a round trip is a write that follows a read. "+
			"Commands come from a go-redis hook, statements from a pgx tracer. Each operation is counted over %d runs after a warm-up run "+
			"(scripts cached, statements prepared). Without the warm-up, a script's first run costs one more round trip (EVALSHA, NOSCRIPT, EVAL) "+
			"and a statement's first run on a connection one more (prepare). Redis's time per operation is in the server-time table above, measured against floors.", suite.RTRuns),
		Mem:     mem,
		MemNote: memNote,
		Errors:  errs,
	}
	if *svgPath != "" && *out != "" {
		rel, err := filepath.Rel(filepath.Dir(*out), *svgPath)
		if err != nil {
			rel = *svgPath
		}
		doc.PlotPath = filepath.ToSlash(rel)
	}
	md := report.Markdown(doc)
	if *out == "" {
		fmt.Print(md)
	} else {
		existing, _ := os.ReadFile(*out)
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			fatal(err)
		}
		if err := os.WriteFile(*out, []byte(report.Splice(string(existing), md)), 0o644); err != nil {
			fatal(err)
		}
		logf("wrote %s", *out)
		for _, g := range summaries {
			fmt.Println(report.GroupTable(g))
		}
		fmt.Println(report.TargetTable(doc.Targets))
	}
	if *svgPath != "" {
		if err := os.WriteFile(*svgPath, []byte(report.SVG(summaries, targets)), 0o644); err != nil {
			fatal(err)
		}
		logf("wrote %s", *svgPath)
	}
	logf("done in %v", time.Since(started).Round(time.Second))
}

// costTargets are issue 12's goals on server time, reported and never
// asserted.
var costTargets = []report.CostTarget{
	{Name: "fenced Put (same token) ≤ 1.05× the scripted fenced-write floor, server time", Job: "fenced write", Row: "fencekit Store.Put, same token", Limit: 1.05},
	{Name: "fenced Put (rising token) ≤ 1.05× the scripted fenced-write floor, server time", Job: "fenced write", Row: "fencekit Store.Put, rising token", Limit: 1.05},
	{Name: "fenced Put (rising token near 2^63, worst case) ≤ 1.05× the scripted fenced-write floor, server time", Job: "fenced write", Row: "fencekit Store.Put, rising token near 2^63 (worst case)", Limit: 1.05},
	{Name: "acquire + release ≤ 1.2× the scripted fenced-lock floor, server time", Job: "lock cycle", Row: "fencekit Backend Acquire + Release", Limit: 1.2},
}

// measureCost measures the server time per operation reps times.
func measureCost(ctx context.Context, env *suite.Env, runs, reps int, logf func(string, ...any)) []report.CostRow {
	var repeats [][]report.CostSample
	for i := 0; i < reps; i++ {
		logf("server time per operation, repeat %d/%d", i+1, reps)
		res, err := suite.MeasureServerCost(ctx, env, runs)
		if err != nil {
			logf("server time: %v", err)
			continue
		}
		var rep []report.CostSample
		for _, r := range res {
			s := report.CostSample{Job: r.Job, Name: r.Name, Floor: r.Floor, Ref: r.Ref, Usec: r.Usec, Commands: r.Commands}
			if r.Err != nil {
				s.Err = r.Err.Error()
			}
			rep = append(rep, s)
		}
		repeats = append(repeats, rep)
	}
	return report.SummarizeCost(repeats)
}

// measure runs one case once with testing.Benchmark.
func measure(env *suite.Env, c suite.Case, round int) (report.Sample, error) {
	failed := false
	res := testing.Benchmark(func(b *testing.B) {
		defer func() {
			if b.Failed() {
				failed = true
			}
		}()
		env.RunCase(b, c)
	})
	if err := env.LastError(); err != nil || failed || res.N == 0 {
		if err == nil {
			err = errors.New("benchmark failed")
		}
		return report.Sample{}, err
	}
	return report.Sample{
		Round:       round,
		NsPerOp:     float64(res.T.Nanoseconds()) / float64(res.N),
		AllocsPerOp: float64(res.MemAllocs) / float64(res.N),
		BytesPerOp:  float64(res.MemBytes) / float64(res.N),
		Extra:       res.Extra,
	}, nil
}

// command is the command line that made the document, as run from bench/.
func command() string {
	args := []string{"go run ./cmd/benchtable"}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " '\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args = append(args, a)
	}
	return "cd bench && " + strings.Join(args, " ")
}

func machine(ctx context.Context, env *suite.Env, loadStart string) []report.KV {
	kv := []report.KV{
		{Key: "CPU", Value: cpuModel()},
		{Key: "cores (nproc)", Value: fmt.Sprintf("%d (GOMAXPROCS %d)", runtime.NumCPU(), runtime.GOMAXPROCS(0))},
		{Key: "memory", Value: memTotal()},
		{Key: "kernel", Value: strings.TrimSpace(readFile("/proc/sys/kernel/osrelease"))},
		{Key: "Go", Value: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
	}
	if env.Redis != nil {
		v := "?"
		if info, err := env.Redis.Info(ctx, "server").Result(); err == nil {
			v = infoField(info, "redis_version")
		}
		where := "throwaway redis-server on loopback, --save \"\" --appendonly no"
		if !env.RedisOwned {
			where = "at " + env.RedisAddr
		}
		kv = append(kv, report.KV{Key: "Redis", Value: v + ", " + where})
	}
	if env.PG != nil {
		var v string
		if err := env.PG.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
			v = "?"
		}
		where := "throwaway instance on loopback (initdb), fsync, synchronous_commit and full_page_writes off"
		if !env.PGOwned {
			where = "given by -pg-url"
		}
		kv = append(kv, report.KV{Key: "PostgreSQL", Value: v + ", " + where})
	}
	kv = append(kv, report.KV{Key: "libraries", Value: libraries()})
	kv = append(kv, report.KV{Key: "fencekit", Value: gitDescribe()})
	kv = append(kv, report.KV{Key: "load average (1, 5, 15 min) at start / end", Value: loadStart + " / " + loadavg()})
	kv = append(kv, report.KV{Key: "date", Value: time.Now().UTC().Format("2006-01-02 15:04 MST")})
	return kv
}

func libraries() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	want := []string{"github.com/bsm/redislock", "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9", "github.com/jackc/pgx/v5"}
	var out []string
	for _, w := range want {
		for _, d := range bi.Deps {
			if d.Path == w {
				out = append(out, strings.TrimPrefix(d.Path, "github.com/")+" "+d.Version)
			}
		}
	}
	return strings.Join(out, ", ")
}

func gitDescribe() string {
	rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "status", "--porcelain", "--", "..").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		s += " (with uncommitted changes in the working tree)"
	}
	return s
}

func infoField(info, key string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), key+":"); ok {
			return v
		}
	}
	return "?"
}

func cpuModel() string {
	for _, line := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	for _, line := range strings.Split(readFile("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

func loadavg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], ", ")
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// cleanup stops the servers before a fatal exit.
var cleanup = func() {}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchtable:", err)
	cleanup()
	os.Exit(1)
}
