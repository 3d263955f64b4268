package redis_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/lock"
)

// TestAcquireReportsAnUnreachableServer is the newcomer's case: a go-redis
// client with default options pointed at a port where nothing listens, and
// lock.Client's default options but a short MaxUnreachable. Acquire and Do
// under context.Background give up with ErrNotAcquired, ErrUnreachable and
// the refused connection, instead of retrying in silence forever.
func TestAcquireReportsAnUnreachableServer(t *testing.T) {
	t.Parallel()
	rdb := goredis.NewClient(&goredis.Options{Addr: closedPort(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	// One attempt takes about 1.7 s here: go-redis retries the dial and the
	// command on its own. The bound leaves room for two whole attempts, so
	// that the error carries a refused connection, not the cut third one.
	const bound = 4 * time.Second
	client := lock.New(fenceredis.NewBackend(rdb, nil), &lock.Options{MaxUnreachable: bound})
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
			done := make(chan error, 1)
			go func() { done <- call() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s under context.Background did not return within 30s", name)
			}
			elapsed := time.Since(began)
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s = %v; want ErrNotAcquired, ErrUnreachable and the refused connection", name, err)
			}
			if elapsed > 3*bound {
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
