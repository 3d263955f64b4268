// Command contention runs the contention group (issue 22): W workers loop
// on one lock name, blocking acquire, hold, release, for a few seconds per
// configuration, on every row of package contention, and prints a markdown
// table with the targets judged per row.
//
//	cd bench && go run ./cmd/contention [-dur 3s] [-hold 10ms] [-workers 2,8,32] [-redis-addr host:port] [-postgres-url URL] [-mysql-dsn DSN] [-run REGEXP] [-svg FILE] [-csv FILE]
//	cd bench && go run ./cmd/contention -plot-from ../docs/contention-wait.csv -svg ../docs/contention-wait.svg
//
// -svg writes the plot of p99 and longest wait against W, one line per
// row (report.WaitSVG), and -csv the figures it is drawn from; with
// -plot-from it draws the plot from such a CSV (docs/contention-wait.csv
// holds the figures of docs/benchmarks.md) without running anything.
//
// Without -redis-addr it starts a throwaway redis-server on a free loopback
// port (so that the command counts are its own) and stops it at the end;
// likewise a throwaway PostgreSQL without -postgres-url, when a PostgreSQL
// row is to run. The MariaDB rows run only with -mysql-dsn (tables
// fkbench_contention_*), since there is no throwaway MariaDB.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/bench/contention"
	"github.com/fencekit/fencekit/bench/internal/servers"
	"github.com/fencekit/fencekit/bench/report"
)

func main() {
	dur := flag.Duration("dur", 3*time.Second, "time per configuration")
	hold := flag.Duration("hold", 10*time.Millisecond, "how long each acquisition holds the lock")
	workersFlag := flag.String("workers", "2,8,32", "the numbers of workers, comma-separated")
	redisAddr := flag.String("redis-addr", "", "a Redis to use (default: a throwaway redis-server; \"off\": no Redis rows)")
	pgURL := flag.String("postgres-url", "", "a PostgreSQL to use (default: a throwaway server; \"off\": no PostgreSQL rows)")
	mysqlDSN := flag.String("mysql-dsn", "", "a MariaDB or MySQL (go-sql-driver DSN) for the MariaDB rows (default: none)")
	run := flag.String("run", "", "only the rows whose name matches this regexp")
	svgOut := flag.String("svg", "", "write the plot of wait against W to this file")
	csvOut := flag.String("csv", "", "write the figures of the plot to this file")
	plotFrom := flag.String("plot-from", "", "draw -svg from this CSV of figures and run nothing")
	breakdown := flag.Bool("commands", false, "after each Redis or PostgreSQL row's line, print its commands (or statements) per acquisition by name")
	flag.Parse()

	if *plotFrom != "" {
		if *svgOut == "" {
			log.Fatal("-plot-from needs -svg")
		}
		f, err := os.Open(*plotFrom)
		if err != nil {
			log.Fatal(err)
		}
		series, err := report.ReadWaitCSV(f)
		_ = f.Close()
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(*svgOut, []byte(report.WaitSVG(series)), 0o644); err != nil {
			log.Fatal(err)
		}
		return
	}

	var workers []int
	for _, f := range strings.Split(*workersFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("-workers: %q", f)
		}
		workers = append(workers, n)
	}
	only := regexp.MustCompile(*run)

	var rc *goredis.Client
	switch *redisAddr {
	case "off":
	case "":
		srv, err := servers.StartRedis()
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Stop()
		rc = goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 64})
	default:
		rc = goredis.NewClient(&goredis.Options{Addr: *redisAddr, PoolSize: 64})
	}
	if rc != nil {
		defer rc.Close()
	}

	ctx := context.Background()
	rows := contention.Rows(rc)
	if *pgURL != "off" && (only.MatchString("fencekit PostgreSQL") || only.MatchString("pg_advisory_lock")) {
		url := *pgURL
		if url == "" {
			srv, err := servers.StartPostgres()
			if err != nil {
				log.Fatal(err)
			}
			defer srv.Stop()
			url = srv.URL
		}
		pgRows, closePG, err := contention.PostgresRows(ctx, url)
		if err != nil {
			log.Fatal(err)
		}
		defer closePG()
		rows = append(rows, pgRows...)
	}
	if *mysqlDSN != "" {
		myRows, closeMy, err := contention.MariaDBRows(ctx, *mysqlDSN)
		if err != nil {
			log.Fatal(err)
		}
		defer closeMy()
		rows = append(rows, myRows...)
	}
	fmt.Printf("hold %v, %v per configuration, GOMAXPROCS %s, load %s\n\n", *hold, *dur, os.Getenv("GOMAXPROCS"), loadavg())
	fmt.Println("| row | W | acq/s | wait p50 | wait p99 | wait max | handoff p50 | handoff p99 | per worker min–max | CV | server work/acq | longest-wait target |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	var series []report.WaitSeries
	for _, row := range rows {
		if !only.MatchString(row.Name) {
			continue
		}
		series = append(series, report.WaitSeries{Row: row.Name})
		for i, w := range workers {
			name := fmt.Sprintf("contention:%d:%d:%d", time.Now().UnixNano(), i, w)
			r, err := contention.Run(ctx, row, name, w, *hold, *dur)
			if err != nil {
				log.Fatalf("%s W=%d: %v", row.Name, w, err)
			}
			target := time.Duration(1.5*float64(w)*float64(*hold)) + 50*time.Millisecond
			verdict := "met"
			if r.WaitMax > target {
				verdict = "missed"
			}
			maxWait := ms(r.WaitMax)
			cut := r.Unfinished > 0 && r.WaitMax >= *dur/2
			if cut {
				maxWait = "≥" + maxWait // a wait the run's end cut short
			}
			last := &series[len(series)-1]
			last.Points = append(last.Points, report.WaitPoint{W: w, P99: msf(r.WaitP99), Max: msf(r.WaitMax), MaxCut: cut})
			cmds := "–"
			if !math.IsNaN(r.CommandsPerAcquisition) {
				cmds = fmt.Sprintf("%.1f", r.CommandsPerAcquisition)
			}
			errs := ""
			if r.Errors > 0 {
				errs = fmt.Sprintf(" (%d errors)", r.Errors)
			}
			fmt.Printf("| %s | %d | %.0f | %s | %s | %s | %s | %s | %d–%d | %.0f%% | %s | ≤ %s: %s%s |\n",
				row.Name, w, r.PerSecond, ms(r.WaitP50), ms(r.WaitP99), maxWait,
				ms(r.HandoffP50), ms(r.HandoffP99), r.MinPerWorker, r.MaxPerWorker, 100*r.CV, cmds,
				ms(target), verdict, errs)
			if *breakdown && r.CommandsBy != nil {
				fmt.Printf("|   commands per acquisition: %s |\n", byName(r.CommandsBy))
			}
		}
	}
	if *csvOut != "" {
		f, err := os.Create(*csvOut)
		if err != nil {
			log.Fatal(err)
		}
		if err := report.WriteWaitCSV(f, series); err != nil {
			log.Fatal(err)
		}
		if err := f.Close(); err != nil {
			log.Fatal(err)
		}
	}
	if *svgOut != "" {
		if err := os.WriteFile(*svgOut, []byte(report.WaitSVG(series)), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// msf is d in milliseconds, at least 0.01 (a log scale has no 0).
func msf(d time.Duration) float64 { return max(float64(d)/float64(time.Millisecond), 0.01) }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + " ms"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// byName renders a per-command breakdown, the most frequent first.
func byName(by map[string]float64) string {
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if by[names[i]] != by[names[j]] {
			return by[names[i]] > by[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if by[n] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, by[n]))
		}
	}
	return strings.Join(parts, ", ")
}
