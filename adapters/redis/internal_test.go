package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

func TestMillisRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		time.Millisecond:              1,
		1500 * time.Microsecond:       2,
		time.Second:                   1000,
		time.Second + time.Nanosecond: 1001,
		7 * 24 * time.Hour:            604800000,
		math.MaxInt64:                 math.MaxInt64/1000000 + 1,
	} {
		if got := millis(d); got != want {
			t.Errorf("millis(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestEscapeKeyIsInjective(t *testing.T) {
	names := []string{"", "a", "{", "}", "%", "%7B", "%7D", "%25", "{a}", "}{", "%{", "a%7Bb", "a{b"}
	seen := map[string]string{}
	for _, n := range names {
		e := escapeKey(n)
		for _, c := range e {
			if c == '{' || c == '}' {
				t.Errorf("escapeKey(%q) = %q keeps a brace", n, e)
			}
		}
		if prev, dup := seen[e]; dup {
			t.Errorf("escapeKey(%q) = escapeKey(%q) = %q", n, prev, e)
		}
		seen[e] = n
	}
}

func TestFormatFence(t *testing.T) {
	for tok, want := range map[fence.Token]string{
		1:              "0000000000000000001",
		10:             "0000000000000000010",
		1 << 53:        "0009007199254740992",
		fence.MaxToken: "9223372036854775807",
	} {
		got := formatFence(tok)
		if got != want || len(got) != 19 {
			t.Errorf("formatFence(%d) = %q, want %q", tok, got, want)
		}
		back, err := parseFence(got)
		if err != nil || back != tok {
			t.Errorf("parseFence(%q) = %d, %v", got, back, err)
		}
	}
}

// TestGreaterInLua checks the scripts' comparison against Go's on random and
// edge pairs of 64-bit integers, both unpadded (as the lock counter keeps
// them) and zero-padded to 19 digits (as the Store keeps fences).
func TestGreaterInLua(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := goredis.NewScript(compareLua + "\n" + `
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = greater(ARGV[i], ARGV[i + 1]) and 1 or 0
end
return out`)

	edges := []int64{0, 1, 9, 10, 99, 100, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<62 + 1, math.MaxInt64 - 1, math.MaxInt64}
	var pairs [][2]int64
	for _, a := range edges {
		for _, b := range edges {
			pairs = append(pairs, [2]int64{a, b})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		a := r.Int64()
		b := a + r.Int64N(3) - 1 // neighbours
		if b < 0 {
			b = 0
		}
		if i%2 == 0 {
			b = r.Int64() >> r.IntN(63) // different lengths
		}
		pairs = append(pairs, [2]int64{a, b})
	}
	for _, padded := range []bool{false, true} {
		format := func(v int64) string { return strconv.FormatInt(v, 10) }
		if padded {
			format = func(v int64) string { return fmt.Sprintf("%019d", v) }
		}
		args := make([]any, 0, 2*len(pairs))
		for _, p := range pairs {
			args = append(args, format(p[0]), format(p[1]))
		}
		got, err := script.Run(ctx, c, nil, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pairs {
			want := p[0] > p[1]
			if (got[i] == 1) != want {
				t.Errorf("padded=%v: greater(%s, %s) = %v, want %v", padded, format(p[0]), format(p[1]), got[i] == 1, want)
			}
		}
	}
}

// countReloads is a stateReloader that counts the reloads asked of it.
type countReloads struct{ n int }

func (c *countReloads) ReloadState(context.Context) { c.n++ }

// replyError is a server reply, as go-redis reports one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestClusterReloadAfterConnectionErrorsOnly(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{timeout, true},
		{io.EOF, true},
		{fmt.Errorf("wrapped: %w", syscall.ECONNRESET), true},
		{nil, false},
		{replyError("CLUSTERDOWN The cluster is down"), false},
		{replyError("ERR Error running script"), false},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{&unknownOutcome{ctxErr: context.DeadlineExceeded}, false},
		{goredis.ErrClosed, false}, // the caller closed the client
		{errors.New("unexpected reply"), false},
	} {
		c := &countReloads{}
		r := newClusterReload(struct {
			Client
			stateReloader
		}{nil, c})
		if got := r.after(tc.err); got != tc.want || c.n != map[bool]int{true: 1}[tc.want] {
			t.Errorf("after(%v) = %v with %d reloads, want %v", tc.err, got, c.n, tc.want)
		}
	}
}

func TestClusterReloadRateLimited(t *testing.T) {
	c := &countReloads{}
	r := newClusterReload(struct {
		Client
		stateReloader
	}{nil, c})
	err := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for range 100 { // a storm of failing calls
		r.after(err)
	}
	if c.n != 1 {
		t.Fatalf("%d reloads for 100 errors within %v, want 1", c.n, reloadEvery)
	}
	r.last.Add(-int64(reloadEvery)) // as if reloadEvery had passed
	if !r.after(err) || c.n != 2 {
		t.Fatalf("no reload %v after the last one (%d reloads)", reloadEvery, c.n)
	}

	// Only clients with a slot map get a reloader.
	if newClusterReload(goredis.NewClient(&goredis.Options{})) != nil {
		t.Error("a *goredis.Client got a cluster reloader")
	}
	var nilReload *clusterReload
	if nilReload.after(err) {
		t.Error("the nil reloader asked for a reload")
	}
	var u goredis.UniversalClient = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer u.Close()
	if newClusterReload(u) == nil {
		t.Error("a ClusterClient behind a UniversalClient got no reloader")
	}
}
