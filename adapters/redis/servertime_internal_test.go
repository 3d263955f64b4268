package redis

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// BenchmarkUncontendedServerTime measures the server time (INFO
// commandstats, microseconds inside EVALSHA) of one uncontended lock cycle,
// acquire then release, nobody waiting, three ways on a throwaway server:
//
//   - "before": the scripts of a lock without queued waiting, acquire.lua
//     and the one-key release.lua (what Acquire and Release sent before
//     issue 22), the baseline;
//   - "backend": Backend.Acquire of a lock and Backend.Release as they are;
//   - "client": what lock.Client sends, Backend.Acquire with a place in
//     line (queue.lua) and Backend.Release.
//
// The three run interleaved in short series (series calls each, rounds
// times), so that a busy machine slows them alike; it reports each one's
// median µs per cycle and the median of the per-round ratio to "before".
// From the repository root:
//
//	go test -run '^$' -bench UncontendedServerTime -benchtime 1x ./adapters/redis/
func BenchmarkUncontendedServerTime(b *testing.B) {
	const rounds, series = 60, 300
	srv := testkit.NewRedisServer(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 1})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	be := NewBackend(c, nil)
	owner, err := lock.NewOwner()
	if err != nil {
		b.Fatal(err)
	}
	const (
		ttl            = 10 * time.Second
		clientPlaceTTL = 2 * time.Second // lock.QueueOptions's default
	)
	cycles := []struct {
		name  string
		cycle func() error
	}{
		{"before", func() error {
			if err := acquireScript.run(ctx, c, resend, []string{be.LeaseKey("before"), be.CounterKey("before")}, owner, millis(ttl), be.counterIdle, "").Err(); err != nil {
				return err
			}
			return releaseScript.run(ctx, c, sendOnce, []string{be.LeaseKey("before")}, owner).Err()
		}},
		{"backend", func() error {
			if _, err := be.Acquire(ctx, driver.Request{Name: "backend", Owner: owner, TTL: ttl, Kind: driver.Exclusive}); err != nil {
				return err
			}
			return be.Release(ctx, driver.Claim{Name: "backend", Owner: owner, Kind: driver.Exclusive})
		}},
		{"client", func() error {
			if _, err := be.Acquire(ctx, driver.Request{Name: "client", Owner: owner, TTL: ttl, Kind: driver.Exclusive, Place: clientPlaceTTL}); err != nil {
				return err
			}
			return be.Release(ctx, driver.Claim{Name: "client", Owner: owner, Kind: driver.Exclusive})
		}},
	}
	usec := func() float64 {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
			if !ok {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				if k, v, _ := strings.Cut(kv, "="); k == "usec" {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return f
				}
			}
		}
		b.Fatal("INFO commandstats has no evalsha")
		return 0
	}
	for n := 0; n < b.N; n++ {
		times := make([][]float64, len(cycles))
		ratios := make([][]float64, len(cycles))
		for _, cy := range cycles { // warm up: scripts cached, counters exist
			if err := cy.cycle(); err != nil {
				b.Fatalf("%s: %v", cy.name, err)
			}
		}
		for r := 0; r < rounds; r++ {
			for i, cy := range cycles {
				if err := c.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				for j := 0; j < series; j++ {
					if err := cy.cycle(); err != nil {
						b.Fatalf("%s: %v", cy.name, err)
					}
				}
				times[i] = append(times[i], usec()/series)
			}
			for i := range cycles {
				ratios[i] = append(ratios[i], times[i][r]/times[0][r])
			}
		}
		for i, cy := range cycles {
			b.ReportMetric(median(times[i]), cy.name+"-µs/cycle")
			if i > 0 {
				b.ReportMetric(median(ratios[i]), cy.name+"/before")
			}
		}
	}
}

// median returns the middle of xs (sorting it).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}
