package fencetest

import (
	"context"
	"errors"
	"fmt"
	"os"
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
// effect) or fail with an error matching context.DeadlineExceeded (or
// os.ErrDeadlineExceeded, the network layer's form of it), after
// which the write may or may not have taken effect (then the check moves
// on to a fresh key), and nothing else.
func checkDeadlineMidCall(ctx context.Context, s fence.Store, ns string) error {
	keys := 0
	k := ns + "k0"
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
			if err != nil && !deadlineError(err) && !(op == "Get" && errors.Is(err, fence.ErrNotFound)) {
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
			// The outcome is unknown, and may stay unknown for a while: a
			// network store's write can land after the call returned. So
			// the key is left alone from now on, and the calls go on with
			// a fresh one.
			keys++
			k, cur, value = fmt.Sprintf("%sk%d", ns, keys), 0, nil
		}
	}
	// The store still works once the deadlines are gone.
	tok := cur + 1
	return first(accepted("Put", k, tok, s.Put(ctx, k, tok, []byte("last"))), expectValue(ctx, s, k, []byte("last"), tok))
}

// deadlineError reports whether err says that a deadline passed: the
// context's own error, or the network layer's, which Go's net package
// reports as os.ErrDeadlineExceeded when a dial or read runs out of a
// context's deadline.
func deadlineError(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// expectState fails unless key holds value (nil: no value) with fence f.
func expectState(ctx context.Context, s fence.Store, key string, value []byte, f fence.Token) error {
	if value == nil {
		return expectNoValue(ctx, s, key, f)
	}
	return expectValue(ctx, s, key, value, f)
}
