package fencetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// Checks returns every check of the suite, in the order Run runs them.
func Checks() []Check {
	return []Check{
		{"PutThenGet", checkPutThenGet},
		{"HigherTokenAccepted", checkHigherAccepted},
		{"EqualTokenAccepted", checkEqualAccepted},
		{"LowerTokenRefused", checkLowerRefused},
		{"GetMissingKey", checkGetMissing},
		{"DeleteKeepsFence", checkDeleteKeepsFence},
		{"DeleteStaleRefused", checkDeleteStale},
		{"DeleteMissingKeyLeavesTombstone", checkDeleteMissing},
		{"AdvanceRefusesOlderHolders", checkAdvance},
		{"AdvanceStaleRefused", checkAdvanceStale},
		{"AdvanceMissingKey", checkAdvanceMissing},
		{"ReadModifyWrite", checkReadModifyWrite},
		{"ExactComparison", checkExactComparison},
		{"InvalidInputWritesNothing", checkInvalidInput},
		{"NilAndEmptyValues", checkNilValue},
		{"BinaryValues", checkBinaryValues},
		{"LargeValue", checkLargeValue},
		{"KeysAreIndependent", checkKeysIndependent},
		{"ConcurrentWritersHighestWins", checkConcurrentWriters},
		{"CancelledContextWritesNothing", checkCancelledContext},
	}
}

func checkPutThenGet(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(accepted("Put", k, 5, s.Put(ctx, k, 5, []byte("a"))), expectValue(ctx, s, k, []byte("a"), 5))
}

func checkHigherAccepted(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Put", k, 5, s.Put(ctx, k, 5, []byte("five"))),
		accepted("Put", k, 7, s.Put(ctx, k, 7, []byte("seven"))),
		expectValue(ctx, s, k, []byte("seven"), 7),
	)
}

func checkEqualAccepted(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Put", k, 5, s.Put(ctx, k, 5, []byte("first"))),
		accepted("Put with an equal token", k, 5, s.Put(ctx, k, 5, []byte("second"))),
		expectValue(ctx, s, k, []byte("second"), 5),
	)
}

func checkLowerRefused(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Put", k, 7, s.Put(ctx, k, 7, []byte("seven"))),
		expectStale("Put", s.Put(ctx, k, 5, []byte("five")), k, 5, 7),
		expectStale("Put", s.Put(ctx, k, 6, nil), k, 6, 7),
		expectValue(ctx, s, k, []byte("seven"), 7),
	)
}

func checkGetMissing(ctx context.Context, s fence.Store, ns string) error {
	return expectNoValue(ctx, s, ns+"never-written", 0)
}

func checkDeleteKeepsFence(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Put", k, 5, s.Put(ctx, k, 5, []byte("v"))),
		accepted("Delete", k, 6, s.Delete(ctx, k, 6)),
		expectNoValue(ctx, s, k, 6),
		// The tombstone keeps the fence: the old holder cannot re-create the key.
		expectStale("Put after Delete", s.Put(ctx, k, 5, []byte("resurrected")), k, 5, 6),
		expectNoValue(ctx, s, k, 6),
		accepted("Put with the deleting token", k, 6, s.Put(ctx, k, 6, []byte("again"))),
		expectValue(ctx, s, k, []byte("again"), 6),
	)
}

func checkDeleteStale(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Put", k, 7, s.Put(ctx, k, 7, []byte("v"))),
		expectStale("Delete", s.Delete(ctx, k, 5), k, 5, 7),
		expectValue(ctx, s, k, []byte("v"), 7),
	)
}

func checkDeleteMissing(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Delete of a missing key", k, 3, s.Delete(ctx, k, 3)),
		expectNoValue(ctx, s, k, 3),
		expectStale("Put", s.Put(ctx, k, 2, []byte("old")), k, 2, 3),
		expectNoValue(ctx, s, k, 3),
	)
}

func checkAdvance(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Put", k, 5, s.Put(ctx, k, 5, []byte("old"))),
		accepted("Advance", k, 6, s.Advance(ctx, k, 6)),
		// The value is untouched; only the fence moved.
		expectValue(ctx, s, k, []byte("old"), 6),
		expectStale("Put by the older holder", s.Put(ctx, k, 5, []byte("late")), k, 5, 6),
		expectStale("Delete by the older holder", s.Delete(ctx, k, 5), k, 5, 6),
		expectValue(ctx, s, k, []byte("old"), 6),
		accepted("Put by the advancing holder", k, 6, s.Put(ctx, k, 6, []byte("new"))),
		expectValue(ctx, s, k, []byte("new"), 6),
	)
}

func checkAdvanceStale(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Advance", k, 7, s.Advance(ctx, k, 7)),
		expectStale("Advance", s.Advance(ctx, k, 5), k, 5, 7),
		accepted("Advance with an equal token", k, 7, s.Advance(ctx, k, 7)),
		expectNoValue(ctx, s, k, 7),
	)
}

func checkAdvanceMissing(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Advance of a missing key", k, 4, s.Advance(ctx, k, 4)),
		expectNoValue(ctx, s, k, 4),
		expectStale("Put", s.Put(ctx, k, 3, []byte("old")), k, 3, 4),
		accepted("Put", k, 4, s.Put(ctx, k, 4, []byte("new"))),
		expectValue(ctx, s, k, []byte("new"), 4),
	)
}

// checkReadModifyWrite plays the paused holder: A (token 1) reads, stalls;
// B (token 2) advances, reads, increments and writes; A wakes and writes its
// increment, which would lose B's. The Store must refuse it.
func checkReadModifyWrite(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "counter"
	if err := s.Put(ctx, k, 1, []byte("10")); err != nil {
		return accepted("Put", k, 1, err)
	}
	if err := s.Advance(ctx, k, 1); err != nil {
		return accepted("Advance", k, 1, err)
	}
	recA, err := s.Get(ctx, k)
	if err != nil {
		return err
	}
	if err := s.Advance(ctx, k, 2); err != nil {
		return accepted("Advance", k, 2, err)
	}
	recB, err := s.Get(ctx, k)
	if err != nil {
		return err
	}
	nB, _ := strconv.Atoi(string(recB.Value))
	nA, _ := strconv.Atoi(string(recA.Value))
	return first(
		accepted("Put", k, 2, s.Put(ctx, k, 2, []byte(strconv.Itoa(nB+1)))),
		expectStale("Put by the paused holder", s.Put(ctx, k, 1, []byte(strconv.Itoa(nA+1))), k, 1, 2),
		expectValue(ctx, s, k, []byte("11"), 2),
	)
}

// Tokens around the places where a double or a string comparison breaks.
var comparisonPairs = [][2]fence.Token{
	{9, 10},
	{99, 100},
	{1<<53 - 1, 1 << 53},
	{1 << 53, 1<<53 + 1},
	{1<<62 + 1, 1<<62 + 2},
	{fence.MaxToken - 1, fence.MaxToken},
	{1, fence.MaxToken},
}

func checkExactComparison(ctx context.Context, s fence.Store, ns string) error {
	for i, p := range comparisonPairs {
		lo, hi := p[0], p[1]
		k := fmt.Sprintf("%spair%d", ns, i)
		if err := first(
			accepted("Put", k, lo, s.Put(ctx, k, lo, []byte("lo"))),
			accepted("Put", k, hi, s.Put(ctx, k, hi, []byte("hi"))),
			expectStale("Put", s.Put(ctx, k, lo, []byte("lo again")), k, lo, hi),
			expectStale("Advance", s.Advance(ctx, k, lo), k, lo, hi),
			expectStale("Delete", s.Delete(ctx, k, lo), k, lo, hi),
			accepted("Put with an equal token", k, hi, s.Put(ctx, k, hi, []byte("hi again"))),
			expectValue(ctx, s, k, []byte("hi again"), hi),
		); err != nil {
			return fmt.Errorf("tokens %d < %d: %w", lo, hi, err)
		}
	}
	return nil
}

func checkInvalidInput(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	for _, tok := range []fence.Token{0, -1, -1 << 63} {
		for op, err := range map[string]error{
			"Put":     s.Put(ctx, k, tok, []byte("v")),
			"Delete":  s.Delete(ctx, k, tok),
			"Advance": s.Advance(ctx, k, tok),
		} {
			if !errors.Is(err, fence.ErrInvalid) {
				return fmt.Errorf("%s(%q, token %d): %v; want an error matching fence.ErrInvalid", op, k, tok, err)
			}
		}
	}
	for op, err := range map[string]error{
		"Put":     s.Put(ctx, "", 1, []byte("v")),
		"Delete":  s.Delete(ctx, "", 1),
		"Advance": s.Advance(ctx, "", 1),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			return fmt.Errorf("%s with an empty key: %v; want an error matching fence.ErrInvalid", op, err)
		}
	}
	if _, err := s.Get(ctx, ""); !errors.Is(err, fence.ErrInvalid) {
		return fmt.Errorf("Get with an empty key: %v; want an error matching fence.ErrInvalid", err)
	}
	for _, bad := range []string{ns + "nul\x00byte", ns + "bad\xff\xfeutf8", ns + strings.Repeat("x", fence.MaxKeyLen)} {
		if err := s.Put(ctx, bad, 1, []byte("v")); !errors.Is(err, fence.ErrInvalid) {
			return fmt.Errorf("Put with key %.40q: %v; want an error matching fence.ErrInvalid", bad, err)
		}
	}
	return expectNoValue(ctx, s, k, 0)
}

func checkNilValue(ctx context.Context, s fence.Store, ns string) error {
	return first(
		accepted("Put with a nil value", ns+"nil", 1, s.Put(ctx, ns+"nil", 1, nil)),
		expectValue(ctx, s, ns+"nil", []byte{}, 1),
		accepted("Put with an empty value", ns+"empty", 1, s.Put(ctx, ns+"empty", 1, []byte{})),
		expectValue(ctx, s, ns+"empty", []byte{}, 1),
	)
}

func checkBinaryValues(ctx context.Context, s fence.Store, ns string) error {
	v := []byte{0, 1, 2, 0xff, 0xfe, 0, '\n', '"', '\'', '\\', 0xc3, 0x28}
	return first(
		accepted("Put", ns+"bin", 1, s.Put(ctx, ns+"bin", 1, v)),
		expectValue(ctx, s, ns+"bin", v, 1),
	)
}

func checkLargeValue(ctx context.Context, s fence.Store, ns string) error {
	v := make([]byte, 1<<20)
	_, _ = rand.Read(v)
	k := ns + "large"
	return first(accepted("Put of 1 MiB", k, 1, s.Put(ctx, k, 1, v)), expectValue(ctx, s, k, v, 1))
}

// checkKeysIndependent uses keys that are prefixes of each other, and keys
// with characters that mean something to a key-value store or a shell.
func checkKeysIndependent(ctx context.Context, s fence.Store, ns string) error {
	keys := []string{"a", "a:b", "a:", "{a}", "}{", "a b", "ключ", "'; DROP TABLE t; --", "%s%d"}
	for i, k := range keys {
		if err := s.Put(ctx, ns+k, fence.Token(10+i), []byte(k)); err != nil {
			return accepted("Put", ns+k, fence.Token(10+i), err)
		}
	}
	if err := expectStale("Put", s.Put(ctx, ns+"a", 1, nil), ns+"a", 1, 10); err != nil {
		return err
	}
	for i, k := range keys {
		if err := expectValue(ctx, s, ns+k, []byte(k), fence.Token(10+i)); err != nil {
			return err
		}
	}
	return nil
}

// checkConcurrentWriters races many writers with distinct tokens: whatever the
// interleaving, the highest token's value must be the one left.
func checkConcurrentWriters(ctx context.Context, s fence.Store, ns string) error {
	const n = 64
	k := ns + "k"
	tokens := mrand.Perm(n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				tok := fence.Token(tokens[i] + 1)
				err := s.Put(ctx, k, tok, []byte(tok.String()))
				if err != nil && !errors.Is(err, fence.ErrStale) {
					errs <- fmt.Errorf("concurrent Put(%q, %d): %v", k, tok, err)
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return expectValue(ctx, s, k, []byte(strconv.Itoa(n)), n)
}

func checkCancelledContext(ctx context.Context, s fence.Store, ns string) error {
	done, cancel := context.WithCancel(ctx)
	cancel()
	k := ns + "k"
	if err := s.Put(done, k, 1, []byte("v")); err == nil {
		return fmt.Errorf("Put with a cancelled context succeeded; want an error")
	}
	if err := s.Advance(done, k, 2); err == nil {
		return fmt.Errorf("Advance with a cancelled context succeeded; want an error")
	}
	if err := s.Delete(done, k, 3); err == nil {
		return fmt.Errorf("Delete with a cancelled context succeeded; want an error")
	}
	if _, err := s.Get(done, k); err == nil {
		return fmt.Errorf("Get with a cancelled context succeeded; want an error")
	}
	return expectNoValue(ctx, s, k, 0)
}
