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

	"github.com/fencekit/fencekit/internal/testkit"
)

// TestGreaterEdges runs compare.lua's greater over the pairs its two steps
// could get wrong: pairs that are one apart yet equal as doubles (above
// 2^53), pairs that straddle the split between the first ten digits and
// the last nine (the halves then disagree with the neighbouring digits),
// pairs whose leading digits agree, and lengths that change at 10^18. Each
// pair runs both ways, equal pairs too, zero-padded to 19 digits (as the
// Store keeps fences) and unpadded (as a lock counter is).
func TestGreaterEdges(t *testing.T) {
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

	const (
		g   = int64(1_000_000_000)
		e18 = g * g
	)
	centres := []int64{
		1, 9, 10, g - 1, g, g + 1, 10 * g,
		1<<53 - 1, 1 << 53, 1<<53 + 1,
		e18 - 1, e18, e18 + 1,
		math.MaxInt64/g*g - 1, math.MaxInt64 / g * g, // a 10^9 boundary below the top
		math.MaxInt64 - 1024, math.MaxInt64 - 1, math.MaxInt64,
	}
	var pairs [][2]int64
	add := func(a, b int64) {
		if a >= 0 && b >= 0 {
			pairs = append(pairs, [2]int64{a, b}, [2]int64{b, a})
		}
	}
	for _, m := range centres {
		for _, d := range []int64{0, 1, 2, 5, 511, 512, 1023, 1024, 2047, 2048, g - 1, g, g + 1} {
			if m <= math.MaxInt64-d {
				add(m, m+d)
			}
			add(m, m-d)
		}
	}
	// Random pairs near the top whose doubles tie and whose first ten
	// digits agree (or differ by one across a 10^9 boundary).
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 1000; i++ {
		a := math.MaxInt64 - r.Int64N(1<<40)
		d := r.Int64N(2049) - 1024
		if i%4 == 0 { // put the pair around a multiple of 10^9
			a = a/g*g + r.Int64N(8) - 4
		}
		if a > math.MaxInt64-1024 {
			a -= 2048
		}
		add(a, a+d)
	}
	for _, padded := range []bool{false, true} {
		format := func(v int64) string { return strconv.FormatInt(v, 10) }
		if padded {
			format = formatFence19
		}
		args := make([]any, 0, 2*len(pairs))
		for _, p := range pairs {
			args = append(args, format(p[0]), format(p[1]))
		}
		got, err := script.Run(ctx, c, nil, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(pairs) {
			t.Fatalf("%d answers for %d pairs", len(got), len(pairs))
		}
		for i, p := range pairs {
			if want := p[0] > p[1]; (got[i] == 1) != want {
				t.Errorf("padded=%v: greater(%s, %s) = %v, want %v", padded, format(p[0]), format(p[1]), got[i] == 1, want)
			}
		}
	}
	t.Logf("%d pairs, both ways, padded and unpadded", len(pairs))
}

func formatFence19(v int64) string { return fmt.Sprintf("%019d", v) }
