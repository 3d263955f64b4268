package testkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewPostgresStandby makes a streaming-replication standby of primary: a
// base backup (pg_basebackup -X stream -R, which writes standby.signal and
// primary_conninfo) started as a hot standby on a free port. Promote it with
// Promote; make the primary wait for it with SetSynchronousStandby. It is
// removed when t ends.
func NewPostgresStandby(t testing.TB, primary *PostgresServer) *PostgresServer {
	t.Helper()
	s := &PostgresServer{t: t, bin: primary.bin, cred: primary.cred}
	var err error
	s.dir, err = os.MkdirTemp(filepath.Dir(primary.dir), "fencekit-pg-standby-")
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			_ = os.RemoveAll(s.dir)
			t.Fatalf("testkit: %v", err)
		}
	}
	if err := s.startWatchdog(); err != nil {
		_ = os.RemoveAll(s.dir)
		t.Fatalf("testkit: %v", err)
	}
	t.Cleanup(s.cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	backup := exec.CommandContext(ctx, postgresTool(s.bin, "pg_basebackup"),
		"-D", s.dataDir(), "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-X", "stream", "-R", "-c", "fast", "--no-sync")
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	backup.Dir = s.dir
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("testkit: pg_basebackup: %v\n%s", err, out)
	}
	if err := s.start(true); err != nil {
		t.Fatalf("testkit: start standby: %v", err)
	}
	return s
}

// Exec runs one SQL statement on a fresh connection to the server (for
// administration in tests) and fails t on error.
func (s *PostgresServer) Exec(sql string, args ...any) {
	s.t.Helper()
	if err := s.query(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, sql, args...)
		return err
	}); err != nil {
		s.t.Fatalf("testkit: %s: %v", sql, err)
	}
}

// QueryString runs a query that returns one text value.
func (s *PostgresServer) QueryString(sql string, args ...any) string {
	s.t.Helper()
	var v string
	if err := s.query(func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, sql, args...).Scan(&v)
	}); err != nil {
		s.t.Fatalf("testkit: %s: %v", sql, err)
	}
	return v
}

func (s *PostgresServer) query(f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return f(ctx, c)
}

// SetSynchronousStandby sets synchronous_standby_names on this primary
// (ALTER SYSTEM, then a reload); "*" makes commits that ask for
// synchronous_commit=on wait for any standby, "" turns that off. With a
// name set it waits until a standby streams in sync.
func (s *PostgresServer) SetSynchronousStandby(names string) {
	s.t.Helper()
	s.Exec("ALTER SYSTEM SET synchronous_standby_names = '" + quoteLiteral(names) + "'")
	s.Exec("SELECT pg_reload_conf()")
	if names == "" {
		return
	}
	s.waitPG("a standby in sync", func() bool {
		return s.QueryString("SELECT count(*)::text FROM pg_stat_replication WHERE sync_state = 'sync'") != "0"
	})
}

// WaitStandbyCaughtUp waits until standby has replayed everything this
// primary had written when it was called.
func (s *PostgresServer) WaitStandbyCaughtUp(standby *PostgresServer) {
	s.t.Helper()
	lsn := s.QueryString("SELECT pg_current_wal_lsn()::text")
	standby.waitPG("replay up to "+lsn, func() bool {
		return standby.QueryString("SELECT (pg_last_wal_replay_lsn() >= $1::pg_lsn)::text", lsn) == "true"
	})
}

// Promote promotes this standby (pg_promote, waiting for it) and checks
// that it has left recovery.
func (s *PostgresServer) Promote() {
	s.t.Helper()
	if got := s.QueryString("SELECT pg_promote(true, 60)::text"); got != "true" {
		s.t.Fatalf("testkit: pg_promote returned %s", got)
	}
	s.waitPG("the end of recovery", func() bool {
		return s.QueryString("SELECT pg_is_in_recovery()::text") == "false"
	})
}

// waitPG polls cond until it holds, failing t after startupTimeout.
func (s *PostgresServer) waitPG(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(startupTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("testkit: PostgreSQL on port %d: no %s after %v\n%s", s.port, what, startupTimeout, s.logTail())
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// quoteLiteral doubles single quotes for a SQL string literal; ALTER SYSTEM
// takes no parameters.
func quoteLiteral(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// postgresTool finds one of PostgreSQL's programs: next to postgres in bin,
// next to the file postgres links to (bin may hold links to a few programs
// only), or on PATH.
func postgresTool(bin, name string) string {
	candidates := []string{filepath.Join(bin, name)}
	if real, err := filepath.EvalSymlinks(filepath.Join(bin, "postgres")); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(real), name))
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return candidates[0]
}
