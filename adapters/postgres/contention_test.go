package postgres_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestContentionUnderFaults runs the contention run of every backend
// (chaos.RunContention) on adapters/postgres: a busy lock, semaphore and
// read-write lock at once on a throwaway server of the test's own, reached
// through a fault proxy by a pgxpool with its default configuration, with
// pauses past the TTL, waits given up, waiters killed in line, network
// faults, and the server restarted (a fast shutdown: committed leases and
// tokens survive it) with waiters in line.
func TestContentionUnderFaults(t *testing.T) {
	chaos.RunContentionTest(t, func(t *testing.T) chaos.ContentionConfig {
		srv := testkit.NewPostgresServer(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgxpool.New(ctx, srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if err := postgres.Migrate(ctx, admin, nil); err != nil {
			t.Fatalf("Migrate: %v", err)
		}

		proxy := testkit.NewProxy(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port())))
		cfg, err := pgxpool.ParseConfig(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(proxy.Addr())
		pn, _ := strconv.Atoi(port)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return chaos.ContentionConfig{
			Backend: postgres.NewBackend(pool, nil),
			Store:   postgres.NewStore(pool, nil),
			Name:    "postgres",
			Network: chaos.ProxyNetwork(proxy),
			Restart: func(context.Context) error { return restart(t, func() error { return srv.Restart(false) }) },
		}
	})
}

// restart runs do, the restart of the server, and logs how long it took.
func restart(t *testing.T, do func() error) error {
	began := time.Now()
	err := do()
	t.Logf("server restarted in %v (err: %v)", time.Since(began).Round(time.Millisecond), err)
	return err
}
