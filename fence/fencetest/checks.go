package fencetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"

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
		{"InvalidTokenRefused", checkInvalidToken},
		{"InvalidKeyRefused", checkInvalidKey},
		{"NilAndEmptyValues", checkNilValue},
		{"BinaryValues", checkBinaryValues},
		{"LargeValue", checkLargeValue},
		{"ValuesAreCopied", checkValuesCopied},
		{"KeysAreIndependent", checkKeysIndependent},
		{"KeysDifferingOnlyByCase", checkKeysByCase},
		{"KeysDifferingOnlyBySpaces", checkKeysBySpaces},
		{"KeysDifferingOnlyByNormalization", checkKeysByNormalization},
		{"LongKeys", checkLongKeys},
		{"RandomSequenceMatchesModel", checkRandomSequence},
		{"ConcurrentWritersHighestWins", checkConcurrentPuts},
		{"ConcurrentDeletesAtomic", checkConcurrentDeletes},
		{"ConcurrentAdvancesAtomic", checkConcurrentAdvances},
		{"ConcurrentMixedWritesAtomic", checkConcurrentMixed},
		{"CancelledContextWritesNothing", checkCancelledContext},
		{"DeadlineMidCall", checkDeadlineMidCall},
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

// checkEqualAccepted: every method accepts the token equal to the fence.
func checkEqualAccepted(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	return first(
		accepted("Put", k, 5, s.Put(ctx, k, 5, []byte("first"))),
		accepted("Put with an equal token", k, 5, s.Put(ctx, k, 5, []byte("second"))),
		expectValue(ctx, s, k, []byte("second"), 5),
		accepted("Advance with an equal token", k, 5, s.Advance(ctx, k, 5)),
		expectValue(ctx, s, k, []byte("second"), 5),
		accepted("Delete with an equal token", k, 5, s.Delete(ctx, k, 5)),
		expectNoValue(ctx, s, k, 5),
		accepted("Put with an equal token after Delete", k, 5, s.Put(ctx, k, 5, []byte("third"))),
		expectValue(ctx, s, k, []byte("third"), 5),
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
		expectStale("Put", s.Put(ctx, k, 6, []byte("w")), k, 6, 7),
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
		// A refused Advance must not have moved the fence, down or up.
		expectNoValue(ctx, s, k, 7),
		expectStale("Put", s.Put(ctx, k, 6, []byte("v")), k, 6, 7),
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

// checkValuesCopied: a store may neither keep the caller's buffer nor hand
// out its own; callers reuse buffers and modify what they read.
func checkValuesCopied(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	buf := []byte("original")
	if err := s.Put(ctx, k, 1, buf); err != nil {
		return accepted("Put", k, 1, err)
	}
	copy(buf, "CHANGED!")
	if err := expectValue(ctx, s, k, []byte("original"), 1); err != nil {
		return fmt.Errorf("after the caller reused the buffer it passed to Put: %w", err)
	}
	rec, err := s.Get(ctx, k)
	if err != nil {
		return err
	}
	copy(rec.Value, "CHANGED!")
	if err := expectValue(ctx, s, k, []byte("original"), 1); err != nil {
		return fmt.Errorf("after the caller modified the Value a Get returned: %w", err)
	}
	return nil
}
