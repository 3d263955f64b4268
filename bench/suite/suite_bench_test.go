package suite

import (
	"context"
	"os"
	"sync"
	"testing"
)

// BenchmarkSuite runs every case as a sub-benchmark named group/name, e.g.
//
//	go test -run '^$' -bench 'Suite/redis-cycle-1/' -benchmem
//
// The servers start on first use: a throwaway redis-server and PostgreSQL,
// unless FENCEKIT_BENCH_REDIS_ADDR / FENCEKIT_BENCH_POSTGRES_URL name others
// (FENCEKIT_BENCH_POSTGRES_URL=off skips PostgreSQL).
func BenchmarkSuite(b *testing.B) {
	e := benchEnv(b)
	for _, c := range Cases() {
		g, _ := GroupByID(c.Group)
		if (g.Needs == NeedRedis && e.Redis == nil) || (g.Needs == NeedPostgres && e.PG == nil) {
			continue
		}
		b.Run(c.ID(), func(b *testing.B) { e.RunCase(b, c) })
	}
}

var (
	envOnce sync.Once
	env     *Env
	envErr  error
)

func benchEnv(b *testing.B) *Env {
	envOnce.Do(func() {
		env, envErr = Setup(context.Background(), Options{
			RedisAddr:   os.Getenv("FENCEKIT_BENCH_REDIS_ADDR"),
			PostgresURL: os.Getenv("FENCEKIT_BENCH_POSTGRES_URL"),
			Logf:        b.Logf,
		})
	})
	if envErr != nil {
		b.Fatal(envErr)
	}
	return env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		env.Close()
	}
	os.Exit(code)
}
