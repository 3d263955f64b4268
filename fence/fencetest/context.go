package fencetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// checkCancelledContext: a call whose context is already done writes
// nothing and says why, with an error matching the context's error.
func checkCancelledContext(ctx context.Context, s fence.Store, ns string) error {
	done, cancel := context.WithCancel(ctx)
	cancel()
	k := ns + "k"
	_, getErr := s.Get(done, k)
	for _, c := range []struct {
		op  string
		err error
	}{
		{"Put", s.Put(done, k, 1, []byte("v"))},
		{"Advance", s.Advance(done, k, 2)},
		{"Delete", s.Delete(done, k, 3)},
		{"Get", getErr},
	} {
		if !errors.Is(c.err, context.Canceled) {
			return fmt.Errorf("%s with a cancelled context: %v; want an error matching context.Canceled", c.op, c.err)
		}
	}
	return expectNoValue(ctx, s, k, 0)
}

// MidCallGrace is how long after its context's deadline a call may still
// take to return in DeadlineMidCall. It is generous on purpose: the check is
// after stores that ignore the deadline, not slow ones.
const MidCallGrace = 2 * time.Second

// midCallDeadlines spread the deadline over the call: already past when it
// starts, then within a network round trip, then after it.
var midCallDeadlines = []time.Duration{0, 20 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond,
	time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}

// checkDeadlineMidCall calls every method with deadlines that end before,
// during and after the call. Each call must return within MidCallGrace of
// its deadline, and either complete (a nil error then means the write took
// effect) or fail with an error matching context.DeadlineExceeded, after
// which the write may or may not have taken effect, and nothing else.
func checkDeadlineMidCall(ctx context.Context, s fence.Store, ns string) error {
	k := ns + "k"
	var cur fence.Token // the key's fence, always known exactly
	var value []byte    // the key's value; nil: none
	for _, d := range midCallDeadlines {
		for _, op := range []string{"Put", "Advance", "Get", "Delete"} {
			tok := cur + 1
			v := fmt.Appendf(nil, "v%d", tok)
			dctx, cancel := context.WithTimeout(ctx, d)
			deadline, _ := dctx.Deadline()
			var err error
			after := value // what the key holds if the call takes effect
			switch op {
			case "Put":
				err, after = s.Put(dctx, k, tok, v), v
			case "Advance":
				err = s.Advance(dctx, k, tok)
			case "Delete":
				err, after = s.Delete(dctx, k, tok), nil
			case "Get":
				_, err = s.Get(dctx, k)
			}
			late := time.Since(deadline)
			cancel()
			call := fmt.Sprintf("%s(%q, token %d) with a deadline %v away", op, k, tok, d)
			if late > MidCallGrace {
				return fmt.Errorf("%s returned %v after its deadline; want at most %v", call, late.Round(time.Millisecond), MidCallGrace)
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !(op == "Get" && errors.Is(err, fence.ErrNotFound)) {
				return fmt.Errorf("%s: %v; want success or an error matching context.DeadlineExceeded", call, err)
			}
			if op == "Get" {
				continue
			}
			if err == nil {
				cur, value = tok, after
				if err := expectState(ctx, s, k, value, cur); err != nil {
					return fmt.Errorf("after %s succeeded: %w", call, err)
				}
				continue
			}
			// The outcome is unknown: either state will do; learn which.
			rec, gerr := s.Get(ctx, k)
			switch {
			case rec.Fence == tok && sameValue(rec.Value, gerr, after):
				cur, value = tok, after
			case rec.Fence == cur && sameValue(rec.Value, gerr, value):
			default:
				return fmt.Errorf("after %s failed (%v): Get = %q, %v, fence %d; want %q with fence %d (not applied) or %q with fence %d (applied)",
					call, err, rec.Value, gerr, rec.Fence, value, cur, after, tok)
			}
		}
	}
	// The store still works once the deadlines are gone.
	tok := cur + 1
	return first(accepted("Put", k, tok, s.Put(ctx, k, tok, []byte("last"))), expectValue(ctx, s, k, []byte("last"), tok))
}

// expectState fails unless key holds value (nil: no value) with fence f.
func expectState(ctx context.Context, s fence.Store, key string, value []byte, f fence.Token) error {
	if value == nil {
		return expectNoValue(ctx, s, key, f)
	}
	return expectValue(ctx, s, key, value, f)
}

// sameValue reports whether a Get that returned got and err shows want
// (nil: no value).
func sameValue(got []byte, err error, want []byte) bool {
	if want == nil {
		return errors.Is(err, fence.ErrNotFound)
	}
	return err == nil && string(got) == string(want)
}
