package postgres_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	chaos.RunContentionTest(t, contentionSetup)
}

// TestSoak is the soak (bench/soak): the contention run for as long as
// FENCEKIT_SOAK says, with nothing allowed to grow (rows of every table,
// the server's connections, the pool's, goroutines, heap); it skips
// without it.
func TestSoak(t *testing.T) {
	chaos.RunSoakTest(t, contentionSetup)
}

func contentionSetup(t *testing.T) chaos.ContentionConfig {
	srv := testkit.NewPostgresServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// admin reaches the server directly, for the migration and the
	// probe: the run faults only the proxy.
	admin, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
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
		Probe:   pgProbe(admin, pool),
	}
}

// pgProbe reports, through admin, the rows of every table of the schema
// and the server's connections to the database, and the connections pool
// (the run's) keeps open.
func pgProbe(admin, pool *pgxpool.Pool) func(context.Context) (map[string]int64, error) {
	return func(ctx context.Context) (map[string]int64, error) {
		figs := map[string]int64{"pool_conns": int64(pool.Stat().TotalConns())}
		rows, err := admin.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name")
		if err != nil {
			return nil, err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			var c int64
			// The name comes from the server's catalog, quoted as an
			// identifier.
			if err := admin.QueryRow(ctx, "SELECT COUNT(*) FROM "+pgx.Identifier{n}.Sanitize()).Scan(&c); err != nil {
				return nil, err
			}
			figs["rows_"+n] = c
		}
		var c int64
		if err := admin.QueryRow(ctx, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()").Scan(&c); err != nil {
			return nil, err
		}
		figs["server_conns"] = c
		return figs, nil
	}
}

// restart runs do, the restart of the server, and logs how long it took.
func restart(t *testing.T, do func() error) error {
	began := time.Now()
	err := do()
	t.Logf("server restarted in %v (err: %v)", time.Since(began).Round(time.Millisecond), err)
	return err
}
