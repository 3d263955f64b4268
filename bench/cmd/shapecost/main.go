// Command shapecost reports the cost per operation of the lock shapes of
// issue 23 next to the single-name lock on the same backend: a set of two
// names taken with TryAcquireMulti and released, against two single-name
// TryAcquire + Release; Client.Resume of a live lease, against
// Lease.Extend; and a semaphore permit, a read permit and a write permit
// taken with one attempt and released, against one name's TryAcquire +
// Release. A permit row of an adapter whose Acquire answers
// driver.ErrUnsupported for permits says "not supported by this adapter
// yet" instead of its counts. It prints round trips and server commands (Redis) or
// statements (PostgreSQL) per operation, which are exact, and the
// client-side time per operation as a ratio to the baseline of the same
// round (median over -rounds rounds), which is noisy on a loaded machine.
//
//	cd bench && go run ./cmd/shapecost
//
// takes a few seconds with -redis-addr and -pg-url (throwaway servers are
// started otherwise, as for benchtable).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/fencekit/fencekit/bench/report"
	"github.com/fencekit/fencekit/bench/suite"
)

// baselineOf names, for each operation of a shape, the row it is compared
// with: the same store, this operation and library.
var baselineOf = map[string][2]string{
	suite.OpSetOf2: {suite.OpSetOf2, "fencekit 2 x (TryAcquire + Release)"},
	suite.OpResume: {suite.OpExtendRS, "fencekit Lease.Extend"},
	// The permits, against one name taken and released.
	suite.OpSemaphore:   {suite.OpLockCycle, "fencekit TryAcquire + Release"},
	suite.OpReadPermit:  {suite.OpLockCycle, "fencekit TryAcquire + Release"},
	suite.OpWritePermit: {suite.OpLockCycle, "fencekit TryAcquire + Release"},
}

// unsupportedCell is what a row of an adapter without the capability shows.
const unsupportedCell = "not supported by this adapter yet (lock.ErrUnsupported)"

func main() {
	var (
		rounds    = flag.Int("rounds", 5, "rounds: every case is counted and timed once per round ("+fmt.Sprint(suite.RTRuns)+" operations each)")
		redisAddr = flag.String("redis-addr", "", "use this Redis (never flushed) instead of a throwaway redis-server")
		pgURL     = flag.String("pg-url", "", `use this PostgreSQL instead of a throwaway instance; "off" skips PostgreSQL`)
	)
	flag.Parse()
	ctx := context.Background()
	env, err := suite.Setup(ctx, suite.Options{RedisAddr: *redisAddr, PostgresURL: *pgURL})
	if err != nil {
		fmt.Fprintln(os.Stderr, "shapecost:", err)
		os.Exit(1)
	}
	defer env.Close()
	keep := func(_, op, _ string) bool { return slices.Contains(suite.ShapeOps, op) }
	type key struct{ store, op, lib string }
	var (
		order  []key
		first  = map[key]suite.RTResult{}
		ratios = map[key][]float64{}
		micros = map[key][]float64{}
	)
	for round := 0; round < *rounds; round++ {
		res, err := suite.MeasureRoundTripsOf(ctx, env, keep)
		if err != nil {
			fmt.Fprintln(os.Stderr, "shapecost:", err)
			os.Exit(1)
		}
		byKey := map[key]suite.RTResult{}
		for _, r := range res {
			if r.Err != nil {
				fmt.Fprintf(os.Stderr, "shapecost: %s %s %s: %v\n", r.Store, r.Op, r.Lib, r.Err)
				os.Exit(1)
			}
			k := key{r.Store, r.Op, r.Lib}
			if r.Unsupported != "" {
				if round == 0 {
					order = append(order, k)
					first[k] = r
				}
				continue
			}
			byKey[k] = r
			if round == 0 {
				order = append(order, k)
				first[k] = r
			} else if f := first[k]; f.RoundTrips != r.RoundTrips || f.Commands != r.Commands {
				fmt.Fprintf(os.Stderr, "shapecost: %s %s %s: counts changed between rounds (%v/%v, then %v/%v)\n",
					r.Store, r.Op, r.Lib, f.RoundTrips, f.Commands, r.RoundTrips, r.Commands)
				os.Exit(1)
			}
			micros[k] = append(micros[k], r.Micros)
		}
		for k, r := range byKey {
			if b, ok := baselineOf[k.op]; ok {
				if base, ok := byKey[key{k.store, b[0], b[1]}]; ok && base.Micros > 0 {
					ratios[k] = append(ratios[k], r.Micros/base.Micros)
				}
			}
		}
	}
	fmt.Println("| store | operation | library | round trips | commands / statements | µs/op (median) | time ratio to baseline (median, min-max over rounds) |")
	fmt.Println("|---|---|---|---:|---:|---:|---|")
	for _, k := range order {
		r := first[k]
		if r.Unsupported != "" {
			fmt.Printf("| %s | %s | %s | %s | | | |\n", k.store, k.op, k.lib, unsupportedCell)
			continue
		}
		ratio := "-"
		if isBaseline(k.op, k.lib) {
			ratio = "baseline"
		} else if rs := ratios[k]; len(rs) > 0 {
			ratio = fmt.Sprintf("%.2fx (%.2f-%.2f)", report.Median(rs), slices.Min(rs), slices.Max(rs))
		}
		fmt.Printf("| %s | %s | %s | %.1f | %.1f | %.0f | %s |\n", k.store, k.op, k.lib, r.RoundTrips, r.Commands, report.Median(micros[k]), ratio)
	}
}

// isBaseline says whether the row op, lib is some shape's baseline.
func isBaseline(op, lib string) bool {
	for _, b := range baselineOf {
		if b == [2]string{op, lib} {
			return true
		}
	}
	return false
}
