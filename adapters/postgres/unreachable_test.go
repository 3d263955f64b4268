package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/lock"
)

// TestAcquireReportsAnUnreachableServer is the newcomer's case: a pool with
// pgx's default configuration pointed at a port where nothing listens, and
// lock.Client's default options but a short MaxUnreachable. Acquire and Do
// under context.Background give up with ErrNotAcquired, ErrUnreachable and
// the refused connection, instead of retrying in silence forever.
func TestAcquireReportsAnUnreachableServer(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable", closedPort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const bound = 500 * time.Millisecond
	client := lock.New(newCalls(pool, nil), &lock.Options{MaxUnreachable: bound})
	for name, call := range map[string]func() error{
		"Acquire": func() error {
			_, err := client.Acquire(context.Background(), "job", 10*time.Second)
			return err
		},
		"Do": func() error {
			return client.Do(context.Background(), "job", 10*time.Second, func(context.Context, *lock.Lease) error {
				return errors.New("fn ran without the lock")
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			err := promptly(t, name, call)
			elapsed := time.Since(began)
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s = %v; want ErrNotAcquired, ErrUnreachable and the refused connection", name, err)
			}
			// pgx honours the attempt's context: the bound holds, up to
			// one pause and scheduling on a loaded machine (README.md).
			if elapsed > bound+time.Second {
				t.Fatalf("%s gave up after %v; want about %v", name, elapsed, bound)
			}
			t.Logf("%s: %v after %v", name, err, elapsed.Round(time.Millisecond))
		})
	}
}

// closedPort returns a loopback address where nothing listens: a port the
// kernel just handed out and that was closed at once.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
