// Package fencectltest checks fencectl against a real backend, for the
// tests of every backend of the one fencectl binary (internal/fencectl's
// own, and adapters/dynamodb/fencectlbackend, adapters/etcd/fencectlbackend
// and adapters/nats/fencectlbackend).
package fencectltest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Ctl runs fencectl with the flags that point it at the backend under
// test, then args, and returns its exit code, stdout and stderr.
type Ctl func(args ...string) (code int, stdout, stderr string)

// holder is one entry of inspect --json's holders.
type holder struct {
	Owner string `json:"owner"`
	Kind  string `json:"kind"`
	Token int64  `json:"token"`
	TTLMs int64  `json:"ttl_ms"`
}

// permits is inspect --json of a permit name.
type permits struct {
	Name    string   `json:"name"`
	Held    bool     `json:"held"`
	Kind    string   `json:"kind"`
	Limit   int      `json:"limit"`
	Holders []holder `json:"holders"`
	Waiters int      `json:"waiters"`
}

// row is one entry of list --json.
type row struct {
	Name    string `json:"name"`
	Held    bool   `json:"held"`
	Kind    string `json:"kind"`
	Limit   int    `json:"limit"`
	Owner   string `json:"owner"`
	Token   int64  `json:"token"`
	TTLMs   int64  `json:"ttl_ms"`
	Waiters int    `json:"waiters"`
}

// Permits holds three permits of a semaphore of 3 (with one more caller
// waiting in its line) and two read permits of a read-write lock on b, all
// under the name prefix ns, and checks that fencectl's list, inspect and
// release --force see them: each holder with its owner, token, TTL and
// kind, the waiters, and that a forced release of one permit (named by
// --owner where several hold) frees that permit alone.
func Permits(t *testing.T, b driver.Backend, ns string, ctl Ctl) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = time.Minute
	pool, rwName := ns+"pool", ns+"rw"
	client := lock.New(b, nil)
	sem := client.Semaphore(pool, 3)
	var held []*lock.Lease
	for range 3 {
		l, err := sem.TryAcquire(ctx, ttl)
		require.NoError(t, err)
		defer l.Release(context.Background())
		held = append(held, l)
	}
	// A fourth caller waits in line.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := sem.Acquire(waitCtx, ttl)
		if err != nil {
			close(got)
			return
		}
		got <- l
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := b.Inspect(ctx, pool, driver.Semaphore)
		require.NoError(t, err)
		if info.Waiting == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the fourth caller never stood in line: %+v", info)
		time.Sleep(20 * time.Millisecond)
	}
	rw := client.RWLock(rwName)
	var readers []*lock.Lease
	for range 2 {
		l, err := rw.TryAcquireRead(ctx, ttl)
		require.NoError(t, err)
		defer l.Release(context.Background())
		readers = append(readers, l)
	}

	// list: one row per permit, with its kind, owner, token and TTL.
	code, out, _ := ctl("list", ns)
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, 1+3+2, len(lines), out)
	require.True(t, strings.HasPrefix(lines[0], "NAME"), out)
	for _, h := range header {
		require.Contains(t, lines[0], h)
	}
	for _, l := range held {
		line := lineWith(t, lines, l.Owner())
		require.True(t, strings.HasPrefix(line, pool+" "), line)
		require.Contains(t, line, "semaphore 3")
		require.Contains(t, line, fmt.Sprint(l.Token()))
	}
	for _, l := range readers {
		line := lineWith(t, lines, l.Owner())
		require.True(t, strings.HasPrefix(line, rwName+" "), line)
		require.Contains(t, line, " read ")
		require.Contains(t, line, fmt.Sprint(l.Token()))
	}

	code, out, _ = ctl("--json", "list", ns)
	require.Equal(t, 0, code)
	var rows []row
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Equal(t, 5, len(rows), out)
	for _, l := range held {
		r := rowOf(t, rows, l.Owner())
		require.Equal(t, row{Name: pool, Held: true, Kind: "semaphore", Limit: 3, Owner: l.Owner(), Token: int64(l.Token()), TTLMs: r.TTLMs, Waiters: 1}, r)
		require.True(t, r.TTLMs > 0 && r.TTLMs <= ttl.Milliseconds(), r)
	}
	for _, l := range readers {
		r := rowOf(t, rows, l.Owner())
		require.Equal(t, row{Name: rwName, Held: true, Kind: "read", Owner: l.Owner(), Token: int64(l.Token()), TTLMs: r.TTLMs}, r)
		require.True(t, r.TTLMs > 0, r)
	}

	// watch: the same rows, with the name's waiters.
	code, out, _ = ctl("--json", "watch", ns, "--count", "1", "--interval", "10ms")
	require.Equal(t, 0, code)
	var wv struct {
		Error string `json:"error"`
		Locks []row  `json:"locks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &wv), out)
	require.Equal(t, "", wv.Error)
	require.Equal(t, 5, len(wv.Locks), out)
	for _, l := range held {
		r := rowOf(t, wv.Locks, l.Owner())
		require.Equal(t, row{Name: pool, Held: true, Kind: "semaphore", Limit: 3, Owner: l.Owner(), Token: int64(l.Token()), TTLMs: r.TTLMs, Waiters: 1}, r)
	}
	code, out, _ = ctl("watch", ns, "--count", "1", "--interval", "10ms")
	require.Equal(t, 0, code)
	require.Contains(t, out, ": 5 held (q quits)")
	require.Contains(t, out, "KIND")
	require.Equal(t, 3, strings.Count(out, "semaphore 3"), out)
	require.Equal(t, 2, strings.Count(out, " read "), out)

	// inspect: the shape, every holder, the waiters.
	code, out, _ = ctl("inspect", pool)
	require.Equal(t, 0, code)
	require.Contains(t, out, pool+": semaphore of 3 permits, 3 held, 1 waiting")
	for _, l := range held {
		require.Contains(t, out, "owner:    "+l.Owner())
		require.Contains(t, out, fmt.Sprintf("token:    %d", l.Token()))
	}
	require.Equal(t, 3, strings.Count(out, "permit:   semaphore"), out)
	require.Equal(t, 3, strings.Count(out, "ttl:      "), out)

	code, out, _ = ctl("--json", "inspect", pool)
	require.Equal(t, 0, code)
	var p permits
	require.NoError(t, json.Unmarshal([]byte(out), &p), out)
	require.Equal(t, pool, p.Name)
	require.True(t, p.Held)
	require.Equal(t, "semaphore", p.Kind)
	require.Equal(t, 3, p.Limit)
	require.Equal(t, 1, p.Waiters)
	require.Equal(t, 3, len(p.Holders), p)
	for _, l := range held {
		h := holderOf(t, p.Holders, l.Owner())
		require.Equal(t, holder{Owner: l.Owner(), Kind: "semaphore", Token: int64(l.Token()), TTLMs: h.TTLMs}, h)
		require.True(t, h.TTLMs > 0 && h.TTLMs <= ttl.Milliseconds(), h)
	}

	code, out, _ = ctl("inspect", rwName)
	require.Equal(t, 0, code)
	require.Contains(t, out, rwName+": read-write lock, 2 held, 0 waiting")
	require.Equal(t, 2, strings.Count(out, "permit:   read"), out)
	for _, l := range readers {
		require.Contains(t, out, "owner:    "+l.Owner())
	}

	// release --force: several hold, so --owner must say which.
	code, _, errOut := ctl("release", "--force", pool, "--no-fence")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--owner")
	for _, l := range held {
		require.Contains(t, errOut, l.Owner())
	}
	code, _, errOut = ctl("release", "--force", pool, "--no-fence", "--owner", "nobody")
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "nobody")

	code, out, _ = ctl("--json", "release", "--force", pool, "--no-fence", "--owner", held[0].Owner())
	require.Equal(t, 0, code)
	var rv struct {
		Name     string `json:"name"`
		Kind     string `json:"evicted_kind"`
		Owner    string `json:"evicted_owner"`
		Token    int64  `json:"evicted_token"`
		Released bool   `json:"released"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rv), out)
	require.Equal(t, pool, rv.Name)
	require.Equal(t, "semaphore", rv.Kind)
	require.Equal(t, held[0].Owner(), rv.Owner)
	require.Equal(t, int64(held[0].Token()), rv.Token)
	require.True(t, rv.Released)
	// The caller in line gets the freed permit; the other two stay.
	var next *lock.Lease
	select {
	case next = <-got:
		require.NotNil(t, next, "the waiter's Acquire failed")
		defer next.Release(context.Background())
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the freed permit")
	}
	info, err := b.Inspect(ctx, pool, driver.Semaphore)
	require.NoError(t, err)
	var owners []string
	for _, h := range info.Holders {
		owners = append(owners, h.Owner)
	}
	sort.Strings(owners)
	want := []string{held[1].Owner(), held[2].Owner(), next.Owner()}
	sort.Strings(want)
	require.Equal(t, want, owners)
	require.Nil(t, held[1].Err())
	require.Nil(t, held[2].Err())

	// Text output of a forced release of a read permit; then, with one
	// reader left, release --force picks it without --owner.
	code, out, _ = ctl("release", "--force", rwName, "--no-fence", "--owner", readers[0].Owner())
	require.Equal(t, 0, code)
	require.Contains(t, out, fmt.Sprintf("%s: evicting read permit token %d, owner %s", rwName, readers[0].Token(), readers[0].Owner()))
	code, out, _ = ctl("release", "--force", rwName, "--no-fence")
	require.Equal(t, 0, code)
	require.Contains(t, out, readers[1].Owner())
	code, out, _ = ctl("inspect", rwName)
	require.Equal(t, 0, code)
	require.Equal(t, rwName+": free\n", out)
	code, _, errOut = ctl("release", "--force", rwName, "--no-fence")
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "free")

	// A write permit shows as such.
	w, err := rw.TryAcquireWrite(ctx, ttl)
	require.NoError(t, err)
	defer w.Release(context.Background())
	code, out, _ = ctl("inspect", rwName)
	require.Equal(t, 0, code)
	require.Contains(t, out, rwName+": read-write lock, 1 held, 0 waiting")
	require.Contains(t, out, "permit:   write")
	require.Contains(t, out, fmt.Sprintf("token:    %d", w.Token()))
	code, out, _ = ctl("list", rwName)
	require.Equal(t, 0, code)
	require.Contains(t, lineWith(t, strings.Split(out, "\n"), w.Owner()), " write ")

	// A lock of the same name as a permit name is apart from it: inspect
	// shows both, list both, and release --force wants --owner.
	l, err := client.TryAcquire(ctx, pool, ttl)
	require.NoError(t, err)
	defer l.Release(context.Background())
	code, out, _ = ctl("inspect", pool)
	require.Equal(t, 0, code)
	require.True(t, strings.HasPrefix(out, pool+": held\n"), out)
	require.Contains(t, out, "owner:    "+l.Owner())
	require.Contains(t, out, pool+": semaphore of 3 permits, 3 held, 0 waiting")
	code, out, _ = ctl("list", pool)
	require.Equal(t, 0, code)
	require.Contains(t, lineWith(t, strings.Split(out, "\n"), l.Owner()), " lock ")
	require.Equal(t, 1+1+3, len(strings.Split(strings.TrimSpace(out), "\n")), out)
	code, _, errOut = ctl("release", "--force", pool, "--no-fence")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, l.Owner()+" (the lock")
	code, out, _ = ctl("release", "--force", pool, "--no-fence", "--owner", l.Owner())
	require.Equal(t, 0, code)
	require.Contains(t, out, "lease deleted: "+pool+" is free")
	info, err = b.Inspect(ctx, pool, driver.Semaphore)
	require.NoError(t, err)
	require.Equal(t, 3, len(info.Holders), "the permits must stay: %+v", info)

	// list PREFIX leaves out the permit names outside PREFIX.
	outside, err := client.Semaphore("outside/pool", 2).TryAcquire(ctx, ttl)
	require.NoError(t, err)
	defer outside.Release(context.Background())
	code, out, _ = ctl("list", ns)
	require.Equal(t, 0, code)
	require.False(t, strings.Contains(out, "outside/pool"), out)
	code, out, _ = ctl("list")
	require.Equal(t, 0, code)
	line := lineWith(t, strings.Split(out, "\n"), outside.Owner())
	require.True(t, strings.HasPrefix(line, "outside/pool "), line)
	require.Contains(t, line, " semaphore 2 ")
}

// header are the columns of list's table.
var header = []string{"NAME", "KIND", "OWNER", "TOKEN", "TTL", "WAITERS", "METADATA"}

func lineWith(t *testing.T, lines []string, s string) string {
	t.Helper()
	for _, l := range lines {
		if strings.Contains(l, s) {
			return l
		}
	}
	t.Fatalf("no line holds %q:\n%s", s, strings.Join(lines, "\n"))
	return ""
}

func rowOf(t *testing.T, rows []row, owner string) row {
	t.Helper()
	for _, r := range rows {
		if r.Owner == owner {
			return r
		}
	}
	t.Fatalf("no row of owner %q: %+v", owner, rows)
	return row{}
}

func holderOf(t *testing.T, hs []holder, owner string) holder {
	t.Helper()
	for _, h := range hs {
		if h.Owner == owner {
			return h
		}
	}
	t.Fatalf("no holder %q: %+v", owner, hs)
	return holder{}
}
