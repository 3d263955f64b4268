package fencetest

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/fencekit/fencekit/fence"
)

// comparisonPairs returns pairs lo < hi of tokens on both sides of every
// place where a representation other than a 64-bit integer breaks the order
// or merges two tokens: every power of two (a signed or unsigned integer of
// any width, truncated or sign-extended; bytes compared one by one, signed
// or unsigned; hexadecimal digits without padding), every power of ten
// (decimal digits without padding, or padded to too few), and pairs that a
// float32 or a float64 (Lua, JavaScript, JSON numbers) rounds to one value.
func comparisonPairs() [][2]fence.Token {
	var pairs [][2]fence.Token
	add := func(lo, hi fence.Token) {
		if 1 <= lo && lo < hi {
			pairs = append(pairs, [2]fence.Token{lo, hi})
		}
	}
	for b := 1; b <= 62; b++ {
		p := fence.Token(1) << b
		add(p-1, p)
		add(p, p+1)
	}
	for p := fence.Token(10); p <= 1e18; p *= 10 {
		add(p-1, p)
	}
	// Adjacent tokens that a float rounds to the same number.
	add(1<<24, 1<<24+1)
	add(1<<53, 1<<53+1)
	add(1<<62+1, 1<<62+2)
	add(fence.MaxToken-1, fence.MaxToken)
	add(fence.MaxToken-1024, fence.MaxToken)
	add(1, fence.MaxToken)
	add(math.MaxInt32, math.MaxUint32)
	slices.SortFunc(pairs, func(a, b [2]fence.Token) int {
		if a[0] != b[0] {
			return compare(a[0], b[0])
		}
		return compare(a[1], b[1])
	})
	return slices.Compact(pairs)
}

func compare(a, b fence.Token) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkExactComparison raises a key from lo to hi (with Put, Advance and
// Delete in turn, so that every method's comparison is tested upwards) and
// then offers lo to every method, which must refuse it and report hi
// exactly; hi itself must be accepted again by every method.
func checkExactComparison(ctx context.Context, s fence.Store, ns string) error {
	for i, p := range comparisonPairs() {
		lo, hi := p[0], p[1]
		k := fmt.Sprintf("%spair%d", ns, i)
		raise := [...]struct {
			name string
			err  func() error
		}{
			{"Put", func() error { return s.Put(ctx, k, hi, []byte("hi")) }},
			{"Advance", func() error { return s.Advance(ctx, k, hi) }},
			{"Delete", func() error { return s.Delete(ctx, k, hi) }},
		}[i%3]
		if err := first(
			accepted("Put", k, lo, s.Put(ctx, k, lo, []byte("lo"))),
			accepted(raise.name, k, hi, raise.err()),
			expectStale("Put", s.Put(ctx, k, lo, []byte("lo again")), k, lo, hi),
			expectStale("Advance", s.Advance(ctx, k, lo), k, lo, hi),
			expectStale("Delete", s.Delete(ctx, k, lo), k, lo, hi),
			accepted("Advance with an equal token", k, hi, s.Advance(ctx, k, hi)),
			accepted("Put with an equal token", k, hi, s.Put(ctx, k, hi, []byte("hi again"))),
			expectValue(ctx, s, k, []byte("hi again"), hi),
			accepted("Delete with an equal token", k, hi, s.Delete(ctx, k, hi)),
			expectNoValue(ctx, s, k, hi),
		); err != nil {
			return fmt.Errorf("tokens %d < %d: %w", lo, hi, err)
		}
	}
	return nil
}
