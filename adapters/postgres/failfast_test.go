package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// promptly runs f and returns its error, failing t when f has not returned
// within 30 s: what a call under context.Background that retries a
// permanent error forever looks like.
func promptly(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s under context.Background did not return within 30s: a permanent error is being retried", what)
		return nil
	}
}

// requireSQLState checks that err carries the server's error with code.
func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the cause must be kept: %v", err)
	require.Equal(t, code, pgErr.Code, "%v", err)
}

// requireFailsFast checks that Client.Acquire and Client.Do, both under
// context.Background, return promptly with the cause (SQLSTATE code), Do
// without running its function.
func requireFailsFast(t *testing.T, b driver.Backend, code string) {
	t.Helper()
	client := lock.New(b, nil)
	err := promptly(t, "Acquire", func() error {
		_, err := client.Acquire(context.Background(), "job", time.Second)
		return err
	})
	require.ErrorIs(t, err, lock.ErrNotAcquired)
	require.False(t, driver.Retryable(err))
	requireSQLState(t, err, code)
	t.Logf("Acquire: %v", err)

	ran := false
	err = promptly(t, "Do", func() error {
		return client.Do(context.Background(), "job", time.Second, func(context.Context, *lock.Lease) error {
			ran = true
			return nil
		})
	})
	require.ErrorIs(t, err, lock.ErrNotAcquired)
	requireSQLState(t, err, code)
	require.False(t, ran, "Do ran its function without a lease")
}

// A Backend over a table that does not exist (no Migrate): the error is
// permanent, so Acquire and Do fail at once with 42P01.
func TestAcquireFailsFastOnMissingTable(t *testing.T) {
	requireFailsFast(t, newCalls(testkit.Postgres(t), nil), "42P01")
}

// urlAsRole returns the test server's URL with user set to a role that does
// not exist, and with hosts replaced when hosts is not empty.
func urlAsRole(t *testing.T, hosts string) string {
	t.Helper()
	u, err := url.Parse(testkit.PostgresURL(t))
	if err != nil || u.Scheme == "" {
		t.Skipf("the server's URL is not a URL (%v); cannot change its user", err)
	}
	u.User = url.User("fencekit_no_such_role_" + strings.ToLower(testkit.Namespace(t)))
	if hosts != "" {
		u.Host = hosts
	}
	return u.String()
}

// A pool connecting as a role that does not exist (pgxpool.New with the
// default options): Acquire and Do fail at once with 28000, also when a
// second host in the URL refused the connection (pgx then joins a network
// error to the server's refusal, which alone would look retryable).
func TestAcquireFailsFastOnUnknownRole(t *testing.T) {
	serverURL, err := url.Parse(testkit.PostgresURL(t))
	require.NoError(t, err)
	closed := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, 0))
	for name, hosts := range map[string]string{
		"one host":              "",
		"then a refusing host":  serverURL.Host + "," + closed,
		"after a refusing host": closed + "," + serverURL.Host,
	} {
		t.Run(name, func(t *testing.T) {
			pool, err := pgxpool.New(context.Background(), urlAsRole(t, hosts))
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			requireFailsFast(t, newCalls(pool, nil), "28000")
		})
	}
}

// A lock_timeout (55P03) while another transaction holds the lease row is
// transient: Acquire keeps trying and succeeds once the row is free.
func TestAcquireRetriesLockTimeout(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	_, err := b.acquire(ctx, "job", newOwner(t), driver.MinTTL)
	require.NoError(t, err)

	// The Backend's own pool, with a short lock_timeout on its sessions.
	cfg := pool.Config()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "20ms"
	short, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(short.Close)
	sb := newCalls(short, nil)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1 FROM fencekit_leases WHERE name = 'job' FOR UPDATE")
	require.NoError(t, err)

	_, err = sb.acquire(ctx, "job", newOwner(t), time.Second)
	requireSQLState(t, err, "55P03")
	require.True(t, driver.Retryable(err), "a lock timeout must be transient: %v", err)

	got := make(chan error, 1)
	go func() {
		_, err := lock.New(sb, nil).Acquire(ctx, "job", time.Second)
		got <- err
	}()
	// Let it fail a few times on the lock before the row is released.
	poll(t, "an Acquire waiting on the row lock", func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1`,
			cfg.ConnConfig.RuntimeParams["application_name"]).Scan(&n) == nil && n > 0
	})
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-got)
}

// The SQLSTATE classes the Backend marks as transient, and those it leaves
// permanent, as driver.Retryable sees the Backend's errors.
func TestErrorClassification(t *testing.T) {
	for code, want := range map[string]bool{
		"08006": true, "08001": true, "40001": true, "40P01": true, "53300": true, "53200": true,
		"57P01": true, "57P02": true, "57P03": true, "55P03": true, "57014": true,
		"42P01": false, "28P01": false, "28000": false, "3D000": false, "42501": false,
		"42703": false, "22021": false, "23505": false, "XX000": false,
	} {
		err := postgres.WrapErrForTest("acquire", &pgconn.PgError{Severity: "ERROR", Code: code})
		require.Equal(t, want, driver.Retryable(err), "SQLSTATE %s: %v", code, err)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "SQLSTATE %s: the cause must be kept", code)
	}
	require.True(t, driver.Retryable(postgres.WrapErrForTest("inspect", fmt.Errorf("x: %w", pgconn.ErrConnClosed))))
	require.False(t, driver.Retryable(postgres.WrapErrForTest("inspect", pgx.ErrTxClosed)))
	require.True(t, errors.Is(postgres.WrapErrForTest("put", &pgconn.PgError{Code: "40001"}), postgres.ErrConflict))
}

// Owners that are not valid UTF-8 or contain NUL are refused with
// ErrInvalid by the Client over a Backend (Resume and ResumeDo, the calls
// that take an owner from their caller), before anything reaches
// PostgreSQL (which would answer 22021), and nothing is written.
func TestBadOwnerRefusedBeforeSending(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	db := &countingDB{Pool: pool}
	client := lock.New(postgres.NewBackend(db, nil), nil)
	for _, owner := range []string{"a\x00b", "bad\xff", "\xc3"} {
		_, err := client.Resume(ctx, "job", owner, time.Second)
		require.ErrorIs(t, err, fence.ErrInvalid, "Resume %q", owner)
		err = client.ResumeDo(ctx, "job", owner, time.Second, func(context.Context, *lock.Lease) error { return nil })
		require.ErrorIs(t, err, fence.ErrInvalid, "ResumeDo %q", owner)
	}
	require.Zero(t, db.n.Load(), "statements sent")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM fencekit_leases`).Scan(&n))
	require.Zero(t, n)
}
