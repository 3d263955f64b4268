package fencectltest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// WatchWaiters puts a holder on q/a with a waiter in its line and a holder
// alone on q/b, through b (names under the prefix ctl points fencectl
// at), and checks that fencectl watch counts the waiter: 1 for q/a and 0
// for q/b in --json, and 1 in q/a's WAITERS column.
func WatchWaiters(t *testing.T, b driver.Backend, ctl Ctl) {
	t.Helper()
	ctx := testkit.Context(t)
	const ttl, place = 30 * time.Second, 30 * time.Second
	inLine := func(name string) error {
		_, err := b.Acquire(ctx, driver.Request{Name: name, Owner: testkit.Owner(t), TTL: ttl, Kind: driver.Exclusive, Place: place})
		return err
	}
	require.NoError(t, inLine("q/a"))
	require.NoError(t, inLine("q/b"))
	// The place stays in line for its place TTL after the refusal.
	require.ErrorIs(t, inLine("q/a"), lock.ErrHeld)

	code, out, _ := ctl("--json", "watch", "q/", "--count", "1")
	require.Equal(t, 0, code)
	var v struct {
		Locks []struct {
			Name    string
			Waiters *int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, 2, len(v.Locks), out)
	require.Equal(t, "q/a", v.Locks[0].Name)
	require.NotNil(t, v.Locks[0].Waiters)
	require.Equal(t, int64(1), *v.Locks[0].Waiters)
	require.NotNil(t, v.Locks[1].Waiters)
	require.Equal(t, int64(0), *v.Locks[1].Waiters)

	code, out, _ = ctl("watch", "q/", "--count", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "WAITERS")
	var rowA string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "q/a") {
			rowA = line
		}
	}
	require.True(t, strings.HasSuffix(strings.TrimSpace(rowA), " 1"), rowA)
}
