package fencetest

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// checkKeysIndependent uses keys that are prefixes of each other, and keys
// with characters that mean something to a key-value store or a shell.
func checkKeysIndependent(ctx context.Context, s fence.Store, ns string) error {
	return expectDistinct(ctx, s, ns, "keys that are prefixes of each other or hold special characters",
		"a", "a:b", "a:", "{a}", "}{", "a b", "ключ", "'; DROP TABLE t; --", "%s%d", "a*", "a?", "a_", "a%", "🔒", "a\\")
}

// checkKeysByCase: keys are compared byte for byte, never case- or
// accent-insensitively (as a MySQL/MariaDB _ci or _ai collation would).
func checkKeysByCase(ctx context.Context, s fence.Store, ns string) error {
	return expectDistinct(ctx, s, ns, "keys that differ only by case or accent",
		"key", "Key", "KEY", "kéy", "KÉY", "straße", "STRASSE", "strasse", "ǅ", "ǆ", "Ǆ")
}

// checkKeysBySpaces: trailing and leading white space is part of the key
// (a PAD SPACE collation or a CHAR column ignores trailing spaces).
func checkKeysBySpaces(ctx context.Context, s fence.Store, ns string) error {
	return expectDistinct(ctx, s, ns, "keys that differ only by white space",
		"k", "k ", "k  ", " k", "k\t", "k\n", "k\u00a0", "k\u3000")
}

// checkKeysByNormalization: keys are not Unicode-normalized: "é" as one code
// point (NFC) and as "e" plus a combining accent (NFD) are different keys,
// as are compatibility forms (NFKC would merge them).
func checkKeysByNormalization(ctx context.Context, s fence.Store, ns string) error {
	return expectDistinct(ctx, s, ns, "keys that differ only by Unicode normalization",
		"caf\u00e9", "cafe\u0301", "\u212b", "\u00c5", "A\u030a", "\ufb01", "fi", "x\u00b2", "x2")
}

// checkLongKeys: keys up to fence.MaxKeyLen bytes are accepted whole, never
// truncated: long keys that differ only in their last byte are distinct,
// also when the key is made of multi-byte runes.
func checkLongKeys(ctx context.Context, s fence.Store, ns string) error {
	var keys []string
	for _, n := range []int{64, 100, 191, 255, 256, 500, 767, 768, 1000, fence.MaxKeyLen} {
		body := strings.Repeat("x", n-len(ns)-1)
		keys = append(keys, body+"a", body+"b")
	}
	// Three-byte runes up to the limit: 1024 bytes but only 342 characters.
	runes := strings.Repeat("€", (fence.MaxKeyLen-len(ns)-1)/3)
	runes += strings.Repeat("x", fence.MaxKeyLen-len(ns)-1-len(runes))
	keys = append(keys, runes+"a", runes+"b")
	// Four-byte runes (utf8mb3 columns cannot store them).
	emoji := strings.Repeat("🔒", (fence.MaxKeyLen-len(ns)-1)/4)
	keys = append(keys, emoji+"a", emoji+"b")
	return expectDistinct(ctx, s, ns, "long keys that differ only in their last byte", keys...)
}

// expectDistinct writes every key under ns with its own value and a token
// that decreases from key to key, so that two keys a store takes for one
// make the later write stale; then every key must read back its own value
// and fence, and a token below its own must be refused.
func expectDistinct(ctx context.Context, s fence.Store, ns, what string, keys ...string) error {
	n := fence.Token(len(keys))
	for i, k := range keys {
		tok := 100 + n - fence.Token(i)
		if len(ns+k) > fence.MaxKeyLen {
			return fmt.Errorf("fencetest: key %q too long for the check", k)
		}
		if err := s.Put(ctx, ns+k, tok, []byte(k)); err != nil {
			return fmt.Errorf("%s must be distinct: %w", what, accepted("Put", ns+k, tok, err))
		}
	}
	for i, k := range keys {
		tok := 100 + n - fence.Token(i)
		if err := expectValue(ctx, s, ns+k, []byte(k), tok); err != nil {
			return fmt.Errorf("%s must be distinct: %w", what, err)
		}
	}
	for i, k := range keys {
		tok := 100 + n - fence.Token(i)
		if err := expectStale("Put", s.Put(ctx, ns+k, tok-1, nil), ns+k, tok-1, tok); err != nil {
			return fmt.Errorf("%s must be distinct: %w", what, err)
		}
	}
	return nil
}
