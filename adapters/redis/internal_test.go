package redis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
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
