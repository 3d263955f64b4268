package fencetest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
)

// A broken store of the gallery: the correct store with one realistic
// defect, and the checks that must catch it.
type broken struct {
	name     string
	store    func() fence.Store
	caughtBy []string
	racy     bool // caught by a race: the test repeats its checks
}

// compareAs is a store whose fence comparison goes through a lossy or
// wrongly ordered representation of tokens.
func compareAs[T any](conv func(fence.Token) T, less func(a, b T) bool) func() fence.Store {
	return func() fence.Store {
		return &store{hooks: hooks{refuse: func(_ string, offered, current fence.Token) bool { return less(conv(offered), conv(current)) }}}
	}
}

func lt[T int32 | uint32 | float32 | float64 | string](a, b T) bool { return a < b }

// signedBytes compares big-endian bytes as signed bytes, as Java's byte does.
func signedBytes(a, b []byte) bool {
	for i := range a {
		if int8(a[i]) != int8(b[i]) {
			return int8(a[i]) < int8(b[i])
		}
	}
	return false
}

func bigEndian(t fence.Token) []byte    { return binary.BigEndian.AppendUint64(nil, uint64(t)) }
func littleEndian(t fence.Token) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(t)) }

// foldAccents maps the accented letters the checks use to plain ones, as an
// accent-insensitive collation does.
var foldAccents = strings.NewReplacer("é", "e", "É", "E", "ß", "ss")

// composeNFC composes the decomposed sequences the checks use, as NFC does;
// compatNFKC also folds the compatibility forms, as NFKC does.
var (
	composeNFC = strings.NewReplacer("e\u0301", "\u00e9", "A\u030a", "\u00c5", "\u212b", "\u00c5")
	compatNFKC = strings.NewReplacer("e\u0301", "\u00e9", "A\u030a", "\u00c5", "\u212b", "\u00c5", "\ufb01", "fi", "\u00b2", "2")
)

func truncateBytes(n int) func(string) string {
	return func(k string) string { return k[:min(len(k), n)] }
}

func truncateRunes(n int) func(string) string {
	return func(k string) string {
		if utf8.RuneCountInString(k) <= n {
			return k
		}
		return string([]rune(k)[:n])
	}
}

// validKeyExcept validates keys like fence.ValidateKey but skips one rule.
func validKeyExcept(rule string) func(string) error {
	return func(k string) error {
		err := fence.ValidateKey(k)
		if err != nil && strings.Contains(err.Error(), rule) {
			return nil
		}
		return err
	}
}

// errTimeout is a store's own timeout error that forgets its cause.
func lostCause(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: operation aborted: %v", err)
	}
	return nil
}

func yield(string) { runtime.Gosched() }
func nap(string)   { time.Sleep(time.Microsecond) }
func only(op string, f func(string)) func(string) {
	return func(o string) {
		if o == op {
			f(o)
		}
	}
}

// applyExcept applies every write correctly except op, which does f.
func applyExcept(op string, f func(e *entry, exists bool, t fence.Token, v []byte)) func(string, *entry, bool, fence.Token, []byte) {
	return func(o string, e *entry, exists bool, t fence.Token, v []byte) {
		if o == op {
			f(e, exists, t, v)
			return
		}
		applyCorrectly(o, e, t, v)
	}
}

func gallery() []broken {
	s := func(h hooks) func() fence.Store { return func() fence.Store { return &store{hooks: h} } }
	return []broken{
		// Key identity.
		{"folds the case of keys", s(hooks{id: strings.ToLower}), []string{"KeysDifferingOnlyByCase"}, false},
		{"compares keys case- and accent-insensitively (utf8mb4_general_ci)", s(hooks{id: func(k string) string { return strings.ToLower(foldAccents.Replace(k)) }}), []string{"KeysDifferingOnlyByCase"}, false},
		{"ignores accents but not case", s(hooks{id: foldAccents.Replace}), []string{"KeysDifferingOnlyByCase"}, false},
		{"ignores trailing spaces (PAD SPACE collation)", s(hooks{id: func(k string) string { return strings.TrimRight(k, " ") }}), []string{"KeysDifferingOnlyBySpaces"}, false},
		{"trims white space from keys", s(hooks{id: strings.TrimSpace}), []string{"KeysDifferingOnlyBySpaces"}, false},
		{"NFC-normalizes keys", s(hooks{id: composeNFC.Replace}), []string{"KeysDifferingOnlyByNormalization"}, false},
		{"NFKC-normalizes keys", s(hooks{id: compatNFKC.Replace}), []string{"KeysDifferingOnlyByNormalization"}, false},
		{"truncates keys to 255 bytes", s(hooks{id: truncateBytes(255)}), []string{"LongKeys"}, false},
		{"truncates keys to 767 bytes (InnoDB index prefix)", s(hooks{id: truncateBytes(767)}), []string{"LongKeys"}, false},
		{"truncates keys to 1000 bytes", s(hooks{id: truncateBytes(1000)}), []string{"LongKeys"}, false},
		{"truncates keys to 255 characters (VARCHAR(255))", s(hooks{id: truncateRunes(255)}), []string{"LongKeys"}, false},
		{"refuses 4-byte UTF-8 (utf8mb3)", s(hooks{keyOK: func(k string) error {
			for _, r := range k {
				if utf8.RuneLen(r) == 4 {
					return errors.New("store: incorrect string value")
				}
			}
			return fence.ValidateKey(k)
		}}), []string{"KeysAreIndependent", "LongKeys"}, false},
		{"cuts keys at a NUL byte (C string)", s(hooks{keyOK: validKeyExcept("NUL"), id: func(k string) string { k, _, _ = strings.Cut(k, "\x00"); return k }}), []string{"InvalidKeyRefused"}, false},
		{"accepts the empty key", s(hooks{keyOK: validKeyExcept("empty")}), []string{"InvalidKeyRefused"}, false},
		{"truncates over-long keys instead of refusing them", s(hooks{keyOK: validKeyExcept("longer"), id: truncateBytes(fence.MaxKeyLen)}), []string{"InvalidKeyRefused"}, false},
		{"accepts keys that are not UTF-8", s(hooks{keyOK: validKeyExcept("UTF-8")}), []string{"InvalidKeyRefused"}, false},
		{"Get does not validate keys", s(hooks{getKeyOK: func(string) error { return nil }}), []string{"InvalidKeyRefused"}, false},

		// Tokens.
		{"accepts token 0 on Delete", s(hooks{tokenOK: func(op string, t fence.Token) error {
			if t < 0 || t == 0 && op != "Delete" {
				return fence.Invalid("token %d", t)
			}
			return nil
		}}), []string{"InvalidTokenRefused"}, false},
		{"Advance accepts negative tokens", s(hooks{tokenOK: func(op string, t fence.Token) error {
			if t == 0 || t < 0 && op != "Advance" {
				return fence.Invalid("token %d", t)
			}
			return nil
		}}), []string{"InvalidTokenRefused"}, false},
		{"compares as float64 (Lua, JSON)", compareAs(func(t fence.Token) float64 { return float64(t) }, lt[float64]), []string{"ExactComparison"}, false},
		{"compares as float32", compareAs(func(t fence.Token) float32 { return float32(t) }, lt[float32]), []string{"ExactComparison"}, false},
		{"truncates tokens to int32", compareAs(func(t fence.Token) int32 { return int32(t) }, lt[int32]), []string{"ExactComparison"}, false},
		{"truncates tokens to uint32", compareAs(func(t fence.Token) uint32 { return uint32(t) }, lt[uint32]), []string{"ExactComparison"}, false},
		{"compares unpadded decimal strings", compareAs(func(t fence.Token) string { return strconv.FormatInt(int64(t), 10) }, lt[string]), []string{"ExactComparison"}, false},
		{"compares decimal strings padded to 16 digits", compareAs(func(t fence.Token) string { return fmt.Sprintf("%016d", t) }, lt[string]), []string{"ExactComparison"}, false},
		{"compares unpadded hexadecimal strings", compareAs(func(t fence.Token) string { return strconv.FormatInt(int64(t), 16) }, lt[string]), []string{"ExactComparison"}, false},
		{"compares little-endian bytes", compareAs(littleEndian, func(a, b []byte) bool { return bytes.Compare(a, b) < 0 }), []string{"ExactComparison"}, false},
		{"compares big-endian bytes as signed bytes", compareAs(bigEndian, signedBytes), []string{"ExactComparison"}, false},
		{"stores the fence as a float64", s(hooks{apply: func(op string, e *entry, _ bool, t fence.Token, v []byte) {
			applyCorrectly(op, e, fence.Token(float64(t)), v)
		}}), []string{"ExactComparison"}, false},
		{"Advance alone compares as float64", s(hooks{refuse: func(op string, offered, current fence.Token) bool {
			if op == "Advance" {
				return float64(offered) < float64(current)
			}
			return offered < current
		}}), []string{"ExactComparison"}, false},
		{"Delete does not check the token", s(hooks{refuse: func(op string, offered, current fence.Token) bool {
			return op != "Delete" && offered < current
		}}), []string{"DeleteStaleRefused", "RandomSequenceMatchesModel"}, false},
		{"Advance lowers the fence (no check)", s(hooks{refuse: func(op string, offered, current fence.Token) bool {
			return op != "Advance" && offered < current
		}}), []string{"AdvanceStaleRefused", "RandomSequenceMatchesModel"}, false},
		{"refuses equal tokens on Put", s(hooks{refuse: func(op string, offered, current fence.Token) bool {
			return offered < current || op == "Put" && offered == current
		}}), []string{"EqualTokenAccepted"}, false},
		{"refuses equal tokens on Advance", s(hooks{refuse: func(op string, offered, current fence.Token) bool {
			return offered < current || op == "Advance" && offered == current
		}}), []string{"EqualTokenAccepted"}, false},
		{"refuses equal tokens on Delete", s(hooks{refuse: func(op string, offered, current fence.Token) bool {
			return offered < current || op == "Delete" && offered == current
		}}), []string{"EqualTokenAccepted"}, false},

		// What the writes do.
		{"Delete drops the fence", s(hooks{apply: applyExcept("Delete", func(e *entry, _ bool, _ fence.Token, _ []byte) { *e = entry{} })}),
			[]string{"DeleteKeepsFence", "DeleteMissingKeyLeavesTombstone"}, false},
		{"Delete of a missing key leaves no tombstone", s(hooks{apply: applyExcept("Delete", func(e *entry, exists bool, t fence.Token, _ []byte) {
			if exists {
				*e = entry{fence: t}
			}
		})}), []string{"DeleteMissingKeyLeavesTombstone"}, false},
		{"Advance writes an empty value", s(hooks{apply: applyExcept("Advance", func(e *entry, _ bool, t fence.Token, _ []byte) { *e = entry{value: []byte{}, fence: t} })}),
			[]string{"AdvanceRefusesOlderHolders", "AdvanceMissingKey"}, false},
		{"Advance removes the value", s(hooks{apply: applyExcept("Advance", func(e *entry, _ bool, t fence.Token, _ []byte) { *e = entry{fence: t} })}),
			[]string{"AdvanceRefusesOlderHolders", "ReadModifyWrite"}, false},
		{"a refused write still moves the fence to its token", func() fence.Store {
			st := &store{}
			st.stale = func(key string, offered, current fence.Token) error {
				st.mu.Lock()
				defer st.mu.Unlock()
				st.data[key] = entry{value: st.data[key].value, fence: offered}
				return fence.Stale(key, offered, current)
			}
			return st
		}, []string{"AdvanceStaleRefused", "DeleteStaleRefused", "RandomSequenceMatchesModel"}, false},
		{"Get returns the fence as 0", s(hooks{get: func(e entry) (fence.Record, error) {
			r, err := getCorrectly(e)
			r.Fence = 0
			return r, err
		}}), []string{"PutThenGet", "DeleteKeepsFence"}, false},
		{"Get of a deleted key reports fence 0", s(hooks{get: func(e entry) (fence.Record, error) {
			if e.value == nil {
				return fence.Record{}, fence.ErrNotFound
			}
			return getCorrectly(e)
		}}), []string{"DeleteKeepsFence", "AdvanceMissingKey"}, false},
		{"StaleError without the key", s(hooks{stale: func(_ string, offered, current fence.Token) error { return fence.Stale("", offered, current) }}), []string{"LowerTokenRefused"}, false},
		{"StaleError reports the offered token as the fence", s(hooks{stale: func(key string, offered, _ fence.Token) error { return fence.Stale(key, offered, offered) }}), []string{"LowerTokenRefused"}, false},
		{"stale error is not a *StaleError", s(hooks{stale: func(key string, offered, current fence.Token) error {
			return fmt.Errorf("%w: key %q", fence.ErrStale, key)
		}}), []string{"LowerTokenRefused"}, false},
		{"Get returns a nil value for an empty one", s(hooks{get: func(e entry) (fence.Record, error) {
			r, err := getCorrectly(e)
			if len(r.Value) == 0 {
				r.Value = nil
			}
			return r, err
		}}), []string{"NilAndEmptyValues"}, false},
		{"Put keeps the caller's buffer", s(hooks{apply: applyExcept("Put", func(e *entry, _ bool, t fence.Token, v []byte) {
			*e = entry{value: v, fence: t}
			if v == nil {
				e.value = []byte{}
			}
		})}), []string{"ValuesAreCopied"}, false},
		{"Get hands out the stored buffer", s(hooks{get: func(e entry) (fence.Record, error) {
			if e.value == nil {
				return fence.Record{Fence: e.fence}, fence.ErrNotFound
			}
			return fence.Record{Value: e.value, Fence: e.fence}, nil
		}}), []string{"ValuesAreCopied"}, false},
		{"truncates values to 64 KiB", s(hooks{apply: applyExcept("Put", func(e *entry, _ bool, t fence.Token, v []byte) {
			applyCorrectly("Put", e, t, v[:min(len(v), 1<<16)])
		})}), []string{"LargeValue"}, false},
		{"stores values as C strings", s(hooks{apply: applyExcept("Put", func(e *entry, _ bool, t fence.Token, v []byte) {
			if i := bytes.IndexByte(v, 0); i >= 0 {
				v = v[:i]
			}
			applyCorrectly("Put", e, t, v)
		})}), []string{"BinaryValues"}, false},

		// Atomicity.
		{"Put checks, yields, then writes", s(hooks{gap: only("Put", yield)}), []string{"ConcurrentWritersHighestWins", "ConcurrentMixedWritesAtomic"}, true},
		{"Put checks, sleeps a microsecond, then writes", s(hooks{gap: only("Put", nap)}), []string{"ConcurrentWritersHighestWins"}, true},
		{"Delete checks, yields, then writes", s(hooks{gap: only("Delete", yield)}), []string{"ConcurrentDeletesAtomic"}, true},
		{"Delete checks, sleeps a microsecond, then writes", s(hooks{gap: only("Delete", nap)}), []string{"ConcurrentDeletesAtomic"}, true},
		{"Advance checks, yields, then writes", s(hooks{gap: only("Advance", yield)}), []string{"ConcurrentAdvancesAtomic"}, true},
		{"Advance checks, sleeps a microsecond, then writes", s(hooks{gap: only("Advance", nap)}), []string{"ConcurrentAdvancesAtomic"}, true},
		{"Put raises the fence, then writes the value in a second step", func() fence.Store { return twoStepPut{&store{}} },
			[]string{"ConcurrentWritersHighestWins", "ConcurrentMixedWritesAtomic"}, true},

		// Contexts.
		{"ignores the context", s(hooks{ctxErr: func(context.Context) error { return nil }}), []string{"CancelledContextWritesNothing"}, false},
		{"loses the context's error", s(hooks{ctxErr: lostCause}), []string{"CancelledContextWritesNothing", "DeadlineMidCall"}, false},
		{"writes, then reports the cancelled context", s(hooks{ctxErr: func(context.Context) error { return nil }, after: func(ctx context.Context) error { return ctx.Err() }}),
			[]string{"CancelledContextWritesNothing"}, false},
	}
}

// twoStepPut is Put as Advance followed by an unconditional write of the
// value: each step is atomic, the pair is not.
type twoStepPut struct{ *store }

func (s twoStepPut) Put(ctx context.Context, key string, t fence.Token, v []byte) error {
	if err := s.Advance(ctx, key, t); err != nil {
		return err
	}
	runtime.Gosched()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[key] = entry{value: append([]byte{}, v...), fence: s.data[key].fence}
	return nil
}
