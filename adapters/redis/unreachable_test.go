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

// TestUnreachableBoundWithGoRedisOptions pins what Options.MaxUnreachable
// means over go-redis, as README.md states it. The Client cuts each attempt's
// context at the bound and waits for the attempt to return (so that giving
// up never races an attempt in flight). go-redis with its default options
// does not look at the context while it retries a refused dial (5 dials,
// 100 ms apart, DialerRetries) for each of its own command tries
// (MaxRetries 3): a 1 s bound returns after about 3 s, and the error may be
// the cut attempt's deadline instead of the refused connection. With
// DialerRetries: 1 the bound holds to within a few tens of milliseconds,
// and the error carries the refused connection.
func TestUnreachableBoundWithGoRedisOptions(t *testing.T) {
	t.Parallel()
	const bound = time.Second
	for _, tc := range []struct {
		name    string
		opts    goredis.Options
		within  time.Duration // the most Acquire may take past the bound
		refused bool          // the error must carry the refused connection
	}{
		{"defaults", goredis.Options{}, 3 * time.Second, false},
		{"DialerRetries 1", goredis.Options{DialerRetries: 1}, 500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := tc.opts
			opts.Addr = closedPort(t)
			rdb := goredis.NewClient(&opts)
			t.Cleanup(func() { _ = rdb.Close() })
			client := lock.New(fenceredis.NewBackend(rdb, nil), &lock.Options{MaxUnreachable: bound})
			began := time.Now()
			_, err := client.Acquire(context.Background(), "job", 10*time.Second)
			elapsed := time.Since(began)
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnreachable) {
				t.Fatalf("Acquire = %v; want ErrNotAcquired and ErrUnreachable", err)
			}
			if tc.refused && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("Acquire = %v; want the refused connection too", err)
			}
			// It may give up a little before the bound: when the next
			// attempt would start past it.
			if elapsed > bound+tc.within {
				t.Fatalf("Acquire gave up after %v; want at most %v", elapsed, bound+tc.within)
			}
			t.Logf("%v after %v", err, elapsed.Round(time.Millisecond))
		})
	}
}
