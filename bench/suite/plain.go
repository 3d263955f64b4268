package suite

import (
	"context"
	"fmt"
	"testing"
)

// The plain baselines: what the same write costs with no fencing at all.

func init() {
	addGroup(Group{ID: "redis-write-1", Title: "Redis: fenced Put vs plain SET, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedRedis,
		Note: fmt.Sprintf("The same key rewritten with a %d-byte value; the fenced Put offers the same token every time (equal is accepted).", ValueSize)})
	addGroup(Group{ID: "redis-write-32", Title: fmt.Sprintf("Redis: fenced Put vs plain SET, %d goroutines on distinct keys (throughput)", Workers),
		Kind: Throughput, Needs: NeedRedis})
	addGroup(Group{ID: "redis-read-1", Title: "Redis: fenced Get vs plain GET, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedRedis,
		Note: "Store.Get returns the value and its fence with one HMGET."})

	addCase(Case{Group: "redis-write-1", Name: "plain SET", Baseline: true, Op: benchSet1})
	addCase(Case{Group: "redis-write-32", Name: "plain SET", Baseline: true, Run: benchSet32})
	addCase(Case{Group: "redis-read-1", Name: "plain GET", Baseline: true, Op: benchGet1})
}

func benchSet1(e *Env) (op, error) {
	key := e.Key("set", "lat")
	return func(ctx context.Context) (bool, error) {
		return true, e.Redis.Set(ctx, key, e.Value, 0).Err()
	}, nil
}

func benchSet32(b *testing.B, e *Env) {
	st := runWorkers(b, e, Workers, func(w int) op {
		key := e.Key("set", "tp", w)
		return func(ctx context.Context) (bool, error) { return true, e.Redis.Set(ctx, key, e.Value, 0).Err() }
	})
	b.ReportMetric(float64(b.N)/st.Elapsed.Seconds(), "ops/s")
}

func benchGet1(e *Env) (op, error) {
	key := e.Key("get", "plain")
	if err := e.Redis.Set(context.Background(), key, e.Value, 0).Err(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (bool, error) {
		v, err := e.Redis.Get(ctx, key).Bytes()
		if err == nil && len(v) != len(e.Value) {
			err = fmt.Errorf("GET: %d bytes: %w", len(v), errUnexpected)
		}
		return true, err
	}, nil
}
