package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// invalidTokens are outside 1..MaxToken.
var invalidTokens = []fence.Token{0, -1, math.MinInt64}

// checkInvalidToken: every write method refuses a token outside
// 1..MaxToken with fence.ErrInvalid, on a missing key and on a written one,
// and changes nothing.
func checkInvalidToken(ctx context.Context, s fence.Store, ns string) error {
	missing, written := ns+"missing", ns+"written"
	if err := s.Put(ctx, written, 5, []byte("v")); err != nil {
		return accepted("Put", written, 5, err)
	}
	for _, k := range []string{missing, written} {
		for _, tok := range invalidTokens {
			if err := expectInvalid(writes(ctx, s, k, tok), fmt.Sprintf("(%q, token %d)", k, tok)); err != nil {
				return err
			}
		}
	}
	return first(expectNoValue(ctx, s, missing, 0), expectValue(ctx, s, written, []byte("v"), 5))
}

// checkInvalidKey: every method refuses a key that fence.ValidateKey
// refuses, with fence.ErrInvalid, and writes nothing, not even under the
// valid key the bad one would become if truncated or cleaned.
func checkInvalidKey(ctx context.Context, s fence.Store, ns string) error {
	prefix := ns + strings.Repeat("x", fence.MaxKeyLen-len(ns))
	bad := []struct{ key, near string }{
		{"", ""},
		{ns + "nul\x00byte", ns + "nul"},
		{ns + "nul\x00", ns + "nul"},
		{ns + "bad\xff\xfeutf8", ns + "badutf8"},
		{prefix + "y", prefix},
		// One byte too long, with a multi-byte rune across the limit.
		{prefix[:len(prefix)-1] + "é", prefix[:len(prefix)-1]},
	}
	for _, b := range bad {
		calls := writes(ctx, s, b.key, 1)
		_, getErr := s.Get(ctx, b.key)
		calls["Get"] = getErr
		if err := expectInvalid(calls, fmt.Sprintf("(key %.40q of %d bytes)", b.key, len(b.key))); err != nil {
			return err
		}
		if b.near != "" {
			if err := expectNoValue(ctx, s, b.near, 0); err != nil {
				return fmt.Errorf("after refusing key %.40q: %w", b.key, err)
			}
		}
	}
	return nil
}

// writes calls Put, Delete and Advance with key and tok, and returns their
// errors by method.
func writes(ctx context.Context, s fence.Store, key string, tok fence.Token) map[string]error {
	return map[string]error{
		"Put":     s.Put(ctx, key, tok, []byte("v")),
		"Delete":  s.Delete(ctx, key, tok),
		"Advance": s.Advance(ctx, key, tok),
	}
}

// expectInvalid fails unless every error matches fence.ErrInvalid.
func expectInvalid(errs map[string]error, args string) error {
	for _, op := range []string{"Put", "Delete", "Advance", "Get"} {
		err, ok := errs[op]
		if ok && !errors.Is(err, fence.ErrInvalid) {
			return fmt.Errorf("%s%s: %v; want an error matching fence.ErrInvalid", op, args, err)
		}
	}
	return nil
}
