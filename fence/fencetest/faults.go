package fencetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
)

// NewNetStore builds the store under test for RunFaults. It must make every
// network connection with dial (go-redis: Options.Dialer; pgx:
// ConnConfig.DialFunc), to the server address given to RunFaults, and use
// the client library's default options unless the test means otherwise.
// Every store it returns for one test must share the same data. Close the
// client in t.Cleanup.
type NewNetStore func(t *testing.T, dial faultproxy.DialFunc) fence.Store

// FaultEnv is what one fault check runs against.
type FaultEnv struct {
	// Store is the store under test. Its connections go through Proxy.
	Store fence.Store
	// Proxy sits between Store and the server and injects the faults.
	Proxy *faultproxy.Proxy
	// Other is a second store on the same data, over a healthy network:
	// the newer holder, and the observer of what the server executed.
	Other fence.Store
	// NS starts every key the check uses.
	NS string
	// RequestsBeforeWrite is how many requests Store sends, each waiting
	// for its reply, before the request that writes, in a write on a key
	// it has not written before (a read of the current fence, say). The
	// lost-reply checks let those replies through and lose the write's.
	// Zero (a write is one request) suits most stores. It needs a client
	// that sends each request in one piece (see
	// faultproxy.Proxy.HoldRepliesAfter).
	RequestsBeforeWrite int
}

// FaultCheck is one check of the fault kit.
type FaultCheck struct {
	// Name is the subtest's name.
	Name string
	// Run returns nil when the store behaves under the fault.
	Run func(ctx context.Context, env FaultEnv) error
}

// FaultTimeout bounds each fault check.
const FaultTimeout = 60 * time.Second

// RunFaults runs every fault check as a subtest of t against a network
// store: the checks that the Store contract's rule on unknown outcomes
// holds when the network fails. Each check starts a faultproxy.Proxy in front
// of addr (the server's host:port) and calls newStore twice: once with the
// proxy's Dial for the store under test, once with a plain dialer for a
// second store that plays the newer holder and observes the server.
//
// The checks: a write (Put, Delete, Advance) whose reply is lost after the
// server applied it is not sent again, so it never comes back as ErrStale
// after a newer holder wrote; after such an unknown outcome a retry with the
// same token succeeds, and one after a newer holder wrote is refused as
// stale; a connection cut while a request is on its way gives an error, not
// a hang, and the next call on a healed network works; a reply delayed past
// the context's deadline gives an error matching context.DeadlineExceeded
// at about that deadline, and a retry afterwards loses nothing.
//
// A check runs in well under a second on a healthy store; the delay check
// waits out a 200 ms deadline.
func RunFaults(t *testing.T, addr string, newStore NewNetStore) {
	t.Helper()
	checks := FaultChecks()
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.Name
	}
	faultkit.RunEach(t, addr, FaultTimeout, names,
		func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) FaultEnv {
			return FaultEnv{Store: newStore(t, p.Dial), Proxy: p, Other: newStore(t, plain), NS: Namespace()}
		},
		func(ctx context.Context, i int, env FaultEnv) error { return checks[i].Run(ctx, env) })
}

// writeOp is one of the fenced writes, called by name in messages.
type writeOp struct {
	name string
	// do writes key with token; value is used by Put only.
	do func(ctx context.Context, s fence.Store, key string, token fence.Token, value []byte) error
	// after checks what key holds after do(token) with value, when the key
	// held base at fence base-1 before.
	after func(ctx context.Context, s fence.Store, key string, token fence.Token, value []byte) error
}

var base = []byte("base")

var writeOps = []writeOp{
	{
		name: "Put",
		do: func(ctx context.Context, s fence.Store, k string, tok fence.Token, v []byte) error {
			return s.Put(ctx, k, tok, v)
		},
		after: func(ctx context.Context, s fence.Store, k string, tok fence.Token, v []byte) error {
			return expectValue(ctx, s, k, v, tok)
		},
	},
	{
		name: "Delete",
		do: func(ctx context.Context, s fence.Store, k string, tok fence.Token, _ []byte) error {
			return s.Delete(ctx, k, tok)
		},
		after: func(ctx context.Context, s fence.Store, k string, tok fence.Token, _ []byte) error {
			return expectNoValue(ctx, s, k, tok)
		},
	},
	{
		name: "Advance",
		do: func(ctx context.Context, s fence.Store, k string, tok fence.Token, _ []byte) error {
			return s.Advance(ctx, k, tok)
		},
		after: func(ctx context.Context, s fence.Store, k string, tok fence.Token, _ []byte) error {
			return expectValue(ctx, s, k, base, tok)
		},
	},
}

// FaultChecks returns every check of the fault kit, in the order RunFaults
// runs them.
func FaultChecks() []FaultCheck {
	var checks []FaultCheck
	for _, op := range writeOps {
		checks = append(checks,
			FaultCheck{op.name + "LostReplyNotResent", func(ctx context.Context, env FaultEnv) error { return checkLostReplyNotResent(ctx, env, op) }},
			FaultCheck{op.name + "RetryAfterLostReply", func(ctx context.Context, env FaultEnv) error { return checkRetryAfterLostReply(ctx, env, op) }},
		)
	}
	return append(checks,
		FaultCheck{"RetryAfterNewerHolderIsStale", checkRetryAfterNewerHolder},
		FaultCheck{"CutMidCallErrsAndRecovers", checkCutMidCall},
		FaultCheck{"DelayPastDeadline", checkDelayPastDeadline},
	)
}

// prepare writes base at fence 4 under key and warms the store under test
// up with op on a key of its own, so that the next op goes out at once on a
// ready connection (a pooled connection, a cached script or statement).
func prepare(ctx context.Context, env FaultEnv, op writeOp, key string) error {
	warm := env.NS + "warm"
	return first(
		accepted("Put", key, 4, env.Other.Put(ctx, key, 4, base)),
		accepted("Put", warm, 1, env.Store.Put(ctx, warm, 1, base)),
		accepted(op.name, warm, 1, op.do(ctx, env.Store, warm, 1, []byte("warm"))),
	)
}

// fenceIs returns a condition that holds once key's fence is f, seen by s.
func fenceIs(s fence.Store, key string, f fence.Token) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		rec, err := s.Get(ctx, key)
		if err != nil && !errors.Is(err, fence.ErrNotFound) {
			return false, err
		}
		return rec.Fence == f, nil
	}
}

// unknownOutcome fails unless err may stand for a write that landed: nil,
// or an error that leaves the outcome unknown. ErrStale and ErrInvalid say
// that nothing changed, which is false.
func unknownOutcome(call string, err error) error {
	switch {
	case errors.Is(err, fence.ErrStale):
		return fmt.Errorf("%s, whose reply was lost after the server applied it, returned %v: the store sent it again after a newer holder wrote, and told its caller that nothing changed about a write that landed. A Store must not resend a write on its own; it returns the network error and lets the caller retry with the same token", call, err)
	case errors.Is(err, fence.ErrInvalid):
		return fmt.Errorf("%s, whose reply was lost after the server applied it, returned %v, which says nothing was written", call, err)
	}
	return nil
}

func checkLostReplyNotResent(ctx context.Context, env FaultEnv, op writeOp) error {
	k := env.NS + "k"
	if err := prepare(ctx, env, op, k); err != nil {
		return err
	}
	call := fmt.Sprintf("%s(%q, token 5)", op.name, k)
	newer := func(ctx context.Context) error {
		return accepted("Put by the newer holder", k, 6, env.Other.Put(ctx, k, 6, []byte("newer")))
	}
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforeWrite, call,
		func(ctx context.Context) error { return op.do(ctx, env.Store, k, 5, []byte("v5")) },
		fenceIs(env.Other, k, 5), newer)
	if err != nil {
		return err
	}
	return first(unknownOutcome(call, callErr), expectValue(ctx, env.Other, k, []byte("newer"), 6))
}

func checkRetryAfterLostReply(ctx context.Context, env FaultEnv, op writeOp) error {
	k := env.NS + "k"
	if err := prepare(ctx, env, op, k); err != nil {
		return err
	}
	call := fmt.Sprintf("%s(%q, token 5)", op.name, k)
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforeWrite, call,
		func(ctx context.Context) error { return op.do(ctx, env.Store, k, 5, []byte("first")) },
		fenceIs(env.Other, k, 5), nil)
	if err != nil {
		return err
	}
	if err := unknownOutcome(call, callErr); err != nil {
		return err
	}
	retry := op.do(ctx, env.Store, k, 5, []byte("retry"))
	if retry != nil {
		return fmt.Errorf("%s retried with the same token after its reply was lost (first call: %v): %v; want it accepted, as equal tokens are", call, callErr, retry)
	}
	return op.after(ctx, env.Other, k, 5, []byte("retry"))
}

func checkRetryAfterNewerHolder(ctx context.Context, env FaultEnv) error {
	k := env.NS + "k"
	put := writeOps[0]
	if err := prepare(ctx, env, put, k); err != nil {
		return err
	}
	call := fmt.Sprintf("Put(%q, token 5)", k)
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforeWrite, call,
		func(ctx context.Context) error { return env.Store.Put(ctx, k, 5, []byte("first")) },
		fenceIs(env.Other, k, 5), nil)
	if err != nil {
		return err
	}
	return first(
		unknownOutcome(call, callErr),
		accepted("Put by the newer holder", k, 6, env.Other.Put(ctx, k, 6, []byte("newer"))),
		expectStale("Put retried after a newer holder wrote", env.Store.Put(ctx, k, 5, []byte("retry")), k, 5, 6),
		expectValue(ctx, env.Other, k, []byte("newer"), 6),
	)
}

func checkCutMidCall(ctx context.Context, env FaultEnv) error {
	k := env.NS + "k"
	if err := prepare(ctx, env, writeOps[0], k); err != nil {
		return err
	}
	call := fmt.Sprintf("Put(%q, token 5)", k)
	callErr, err := faultkit.CutInFlight(ctx, env.Proxy, call,
		func(ctx context.Context) error { return env.Store.Put(ctx, k, 5, []byte("cut")) })
	if err != nil {
		return err
	}
	switch {
	case callErr == nil:
		return fmt.Errorf("%s, cut before it reached the server, with new connections refused: reported success for a write that never landed", call)
	case errors.Is(callErr, fence.ErrStale), errors.Is(callErr, fence.ErrInvalid):
		return fmt.Errorf("%s with its connection cut: %v; want a network error (outcome unknown)", call, callErr)
	}
	return first(
		expectValue(ctx, env.Other, k, base, 4),
		accepted("Put on the healed network", k, 5, env.Store.Put(ctx, k, 5, []byte("healed"))),
		expectValue(ctx, env.Store, k, []byte("healed"), 5),
	)
}

func checkDelayPastDeadline(ctx context.Context, env FaultEnv) error {
	k := env.NS + "k"
	if err := prepare(ctx, env, writeOps[0], k); err != nil {
		return err
	}
	if _, err := faultkit.PastDeadline(ctx, env.Proxy, fmt.Sprintf("Put(%q, token 5)", k),
		func(ctx context.Context) error { return env.Store.Put(ctx, k, 5, []byte("late")) }); err != nil {
		return err
	}
	if _, err := faultkit.PastDeadline(ctx, env.Proxy, fmt.Sprintf("Get(%q)", k),
		func(ctx context.Context) error { _, err := env.Store.Get(ctx, k); return err }); err != nil {
		return err
	}
	// The late Put may or may not have landed; the retry with its token
	// settles it, and nothing else was touched.
	return first(
		accepted("Put retried after the deadline", k, 5, env.Store.Put(ctx, k, 5, []byte("retry"))),
		expectValue(ctx, env.Other, k, []byte("retry"), 5),
		expectValue(ctx, env.Other, env.NS+"warm", []byte("warm"), 1),
	)
}
