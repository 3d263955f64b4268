package fencetest

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// sequenceLength is the number of operations of RandomSequenceMatchesModel.
const sequenceLength = 300

// checkRandomSequence runs random Put, Get, Delete and Advance calls, one at
// a time, on a few keys, with tokens just below, at and above each key's
// fence, and compares every result with the contract exactly: the outcome,
// the StaleError's fields, and what Get returns. It catches defects that no
// hand-written sequence thought of, such as a refusal that moves the fence.
func checkRandomSequence(ctx context.Context, s fence.Store, ns string) error {
	type want struct {
		value []byte // nil: no value
		fence fence.Token
	}
	rng := mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
	keys := []string{ns + "a", ns + "b", ns + "c"}
	model := map[string]want{}
	var log []string
	fail := func(err error) error {
		from := max(len(log)-8, 0)
		return fmt.Errorf("%w\n  after (last %d of %d calls):\n    %s", err, len(log)-from, len(log), strings.Join(log[from:], "\n    "))
	}
	for i := range sequenceLength {
		k := keys[rng.IntN(len(keys))]
		m := model[k]
		tok := max(m.fence+fence.Token(rng.IntN(5))-2, 1)
		if rng.IntN(20) == 0 {
			tok = m.fence + fence.Token(rng.Int64N(1<<40)) + 1
		}
		allowed := tok >= m.fence
		var err error
		var op string
		switch rng.IntN(4) {
		case 0:
			v := []byte("v" + strconv.Itoa(i))
			op = fmt.Sprintf("Put(%q, %d, %q)", k, tok, v)
			err = s.Put(ctx, k, tok, v)
			if allowed {
				m = want{v, tok}
			}
		case 1:
			op = fmt.Sprintf("Delete(%q, %d)", k, tok)
			err = s.Delete(ctx, k, tok)
			if allowed {
				m = want{nil, tok}
			}
		case 2:
			op = fmt.Sprintf("Advance(%q, %d)", k, tok)
			err = s.Advance(ctx, k, tok)
			if allowed {
				m.fence = tok
			}
		default:
			op = fmt.Sprintf("Get(%q)", k)
			log = append(log, op)
			var e error
			if m.value == nil {
				e = expectNoValue(ctx, s, k, m.fence)
			} else {
				e = expectValue(ctx, s, k, m.value, m.fence)
			}
			if e != nil {
				return fail(e)
			}
			continue
		}
		log = append(log, fmt.Sprintf("%s -> %v", op, err))
		var e error
		if allowed {
			e = accepted(op, k, tok, err)
		} else {
			e = expectStale(op, err, k, tok, model[k].fence)
		}
		if e != nil {
			return fail(e)
		}
		model[k] = m
	}
	return nil
}
