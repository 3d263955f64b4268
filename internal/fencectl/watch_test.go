package fencectl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestWatchWaiters: on every backend that queues waiters (Redis,
// PostgreSQL, MySQL and PostgreSQL through sqldb), watch counts them.
func TestWatchWaiters(t *testing.T) {
	t.Parallel()
	for name, world := range map[string]func(*testing.T) world{
		"redis":          redisWorld,
		"postgres":       postgresWorld,
		"mysql":          mysqlWorld,
		"postgres-sqldb": postgresSQLWorld,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			watchWaiters(t, world(t))
		})
	}
}

// watchWaiters checks that watch counts the one waiter standing in line
// for a held lock.
func watchWaiters(t *testing.T, w world) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := lock.New(w.backend, &lock.Options{Metadata: "holder"}).Acquire(ctx, "q/a", 20*time.Second)
	require.NoError(t, err)
	defer holder.Release(context.Background())
	// A queued Acquire waits in line until the holder goes.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		l, err := lock.New(w.backend, nil).Acquire(waitCtx, "q/a", 20*time.Second)
		if err == nil {
			_ = l.Release(context.Background())
		}
		waited <- err
	}()
	defer func() { stopWaiting(); <-waited }()

	deadline := time.Now().Add(10 * time.Second)
	var v watchView
	for {
		code, out, _ := ctl(t, w.env, w.args("--json", "watch", "q/", "--count", "1")...)
		require.Equal(t, exitOK, code)
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		require.Equal(t, 1, len(v.Locks), v)
		require.NotNil(t, v.Locks[0].Waiters)
		if *v.Locks[0].Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter counted: %+v", v)
		}
		time.Sleep(20 * time.Millisecond) // a poll with a deadline
	}
	code, out, _ := ctl(t, w.env, w.args("watch", "q/", "--count", "1")...)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "WAITERS")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.True(t, strings.HasSuffix(lines[len(lines)-1], " 1"), lines[len(lines)-1])
}

// TestWatchQuits: q on the input ends watch after the screen it is
// drawing, with exit 0, however long the interval.
func TestWatchQuits(t *testing.T) {
	t.Parallel()
	w := redisWorld(t)
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(w.args("watch", "--interval", "1h"), strings.NewReader("xq"), &out, &errOut, func(k string) string { return w.env[k] })
	}()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, errOut.String())
		require.Equal(t, 1, strings.Count(out.String(), clearScreen), out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not quit on q")
	}
}

// TestWatchUsage: --interval and --count are checked, and belong to watch.
func TestWatchUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "--interval", "0s"}, "--interval must be above zero"},
		{[]string{"watch", "--count", "-1"}, "--count must be zero"},
		{[]string{"list", "--count", "2"}, "list does not take --count"},
		{[]string{"watch", "a", "b"}, "watch takes 0 to 1 arguments"},
	} {
		code, _, errOut := ctl(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("fencectl %q = exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestWatchShowsErrorsAndGoesOn: a refresh that fails shows its error on
// the screen, and the next one draws the table again.
func TestWatchShowsErrorsAndGoesOn(t *testing.T) {
	t.Parallel()
	calls := 0
	tg := &target{kind: "test", list: func(context.Context, string) ([]lock.Info, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("connection reset\nby peer")
		}
		return []lock.Info{{Name: "a", Holders: []lock.Holder{{Owner: "o", Token: 7, TTL: time.Second, Metadata: "m"}}}}, nil
	}}
	var out bytes.Buffer
	c := &config{count: 2, interval: time.Millisecond, timeout: time.Second}
	require.NoError(t, watch(context.Background(), tg, &out, nil, c, ""))
	screens := strings.Split(out.String(), clearScreen)
	require.Equal(t, 3, len(screens), out.String())
	require.Contains(t, screens[1], "error: connection reset; by peer")
	require.Contains(t, screens[1], ": 0 held")
	require.Contains(t, screens[2], "a     lock  7      1s   m")
	require.False(t, strings.Contains(screens[2], "error"), screens[2])
}
