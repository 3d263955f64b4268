package locktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock"
)

// NewNetBackend builds the backend under test for RunFaults. It must make
// every network connection with dial (go-redis: Options.Dialer; pgx:
// ConnConfig.DialFunc), to the server address given to RunFaults, and use
// the client library's default options unless the test means otherwise.
// Every backend it returns for one test must share the same data. Close the
// client in t.Cleanup.
type NewNetBackend func(t *testing.T, dial faultproxy.DialFunc) lock.Backend

// FaultEnv is what one fault check runs against.
type FaultEnv struct {
	// Backend is the backend under test. Its connections go through Proxy.
	Backend lock.Backend
	// Proxy sits between Backend and the server and injects the faults.
	Proxy *faultproxy.Proxy
	// Other is a second backend on the same data, over a healthy network:
	// the next holder, and the observer of what the server executed.
	Other lock.Backend
	// NS starts every lock name the check uses.
	NS string
	// RequestsBeforeAcquire is how many requests Backend sends, each
	// waiting for its reply, before the request that takes the lock, in an
	// Acquire of a name it has not seen (a read of the lease, say). The
	// lost-reply check of Acquire lets those replies through and loses the
	// taking request's. Zero (an Acquire is one request) suits most
	// backends. It needs a client that sends each request in one piece
	// (see faultproxy.Proxy.HoldRepliesAfter).
	RequestsBeforeAcquire int
	// RequestsBeforePermit is RequestsBeforeAcquire for AcquirePermit, on a
	// lock.PermitBackend: how many requests it sends, each waiting for its
	// reply, before the one that makes the grant (a COMMIT after the
	// statements of a transaction, say). Zero suits a backend whose
	// AcquirePermit is one request.
	RequestsBeforePermit int
}

// FaultCheck is one check of the fault kit.
type FaultCheck struct {
	// Name is the subtest's name.
	Name string
	// Run returns nil when the backend behaves under the fault.
	Run func(ctx context.Context, env FaultEnv) error
}

// FaultTimeout bounds each fault check.
const FaultTimeout = 60 * time.Second

// RunFaults runs every fault check as a subtest of t against a network
// backend. Each check starts a faultproxy.Proxy in front of addr (the
// server's host:port) and calls newBackend twice: once with the proxy's Dial
// for the backend under test, once with a plain dialer for a second backend
// that plays the next holder and observes the server.
//
// The checks: an Acquire whose reply is lost after the server took the lock,
// retried by the same owner, gets the same token and lease, never ErrHeld;
// a Release whose reply is lost is not sent again by the client (a resend
// would answer ErrNotHeld, or release the next holder's lease in a backend
// without an owner check); an Extend whose reply is lost can be retried; an
// Acquire whose connection is cut gives an error Client.Acquire retries
// (lock.Retryable), not a hang; Acquire and Release with replies delayed
// past the context's deadline return an error matching
// context.DeadlineExceeded at about that deadline, and nothing is lost.
// On a backend that implements lock.Resumer it also runs ResumeFaultChecks
// (it calls newBackend once more, with a plain dialer, to find out): a
// Resume whose reply is lost, retried, keeps the same token. The checks of
// permits are RunPermitFaults.
func RunFaults(t *testing.T, addr string, newBackend NewNetBackend) {
	t.Helper()
	checks := FaultChecks()
	var d net.Dialer
	if _, ok := newBackend(t, d.DialContext).(lock.Resumer); ok {
		checks = append(checks, ResumeFaultChecks()...) // resume_faults.go
	}
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.Name
	}
	faultkit.RunEach(t, addr, FaultTimeout, names,
		func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) FaultEnv {
			return FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, plain), NS: Namespace()}
		},
		func(ctx context.Context, i int, env FaultEnv) error { return checks[i].Run(ctx, env) })
}

// FaultChecks returns every check of the fault kit, in the order RunFaults
// runs them.
func FaultChecks() []FaultCheck {
	return []FaultCheck{
		{"AcquireLostReplyRetriedSameToken", checkAcquireLostReply},
		{"ReleaseLostReplyNotResent", checkReleaseLostReply},
		{"ExtendLostReplyRetried", checkExtendLostReply},
		{"AcquireCutMidCallRetryable", checkAcquireCut},
		{"DelayPastDeadline", checkLockDelayPastDeadline},
	}
}

// warmUp runs every kind of call on a lock of its own through the backend
// under test, so that the next call goes out at once on a ready connection
// (a pooled connection, a cached script or statement).
func warmUp(ctx context.Context, env FaultEnv, owner string) error {
	warm := env.NS + "warm"
	if _, err := acquire(ctx, env.Backend, warm, owner, longTTL); err != nil {
		return err
	}
	if err := env.Backend.Extend(ctx, warm, owner, longTTL); err != nil {
		return fmt.Errorf("Extend(%q) while held: %w", warm, err)
	}
	if _, err := env.Backend.Inspect(ctx, warm); err != nil {
		return fmt.Errorf("Inspect(%q): %w", warm, err)
	}
	if err := env.Backend.Release(ctx, warm, owner); err != nil {
		return fmt.Errorf("Release(%q) while held: %w", warm, err)
	}
	return nil
}

// heldBy returns a condition that holds once the observer sees name held by
// owner, and records its token in tok.
func heldBy(b lock.Backend, name, owner string, tok *fence.Token) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		info, err := b.Inspect(ctx, name)
		if err != nil {
			return false, err
		}
		*tok = info.Token
		return info.Held && info.Owner == owner, nil
	}
}

func checkAcquireLostReply(ctx context.Context, env FaultEnv) error {
	name, a := env.NS+"lock", owner()
	if err := warmUp(ctx, env, a); err != nil {
		return err
	}
	var got, landed fence.Token
	call := fmt.Sprintf("Acquire(%q)", name)
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforeAcquire, call,
		func(ctx context.Context) (err error) {
			got, err = env.Backend.Acquire(ctx, name, a, longTTL)
			return err
		},
		heldBy(env.Other, name, a, &landed), nil)
	if err != nil {
		return err
	}
	switch {
	case errors.Is(callErr, lock.ErrHeld):
		return fmt.Errorf("%s, whose reply was lost after the server took the lock for its owner: %v. The resend locked its own caller out; an Acquire by the holding owner must return its token", call, callErr)
	case callErr == nil && got != landed:
		return fmt.Errorf("%s with its reply lost returned token %d; the server minted %d", call, got, landed)
	}
	retry, err := env.Backend.Acquire(ctx, name, a, longTTL)
	if err != nil {
		return fmt.Errorf("%s retried by the same owner after its reply was lost (first call: %v): %v; want the same lease", call, callErr, err)
	}
	if retry != landed {
		return fmt.Errorf("%s retried by the same owner after its reply was lost: token %d; want %d, the token of the lease the lost call took", call, retry, landed)
	}
	return expectHolder(ctx, env.Other, name, a, landed)
}

func checkReleaseLostReply(ctx context.Context, env FaultEnv) error {
	name, a, b := env.NS+"lock", owner(), owner()
	if err := warmUp(ctx, env, a); err != nil {
		return err
	}
	if _, err := acquire(ctx, env.Backend, name, a, longTTL); err != nil {
		return err
	}
	var tokB fence.Token
	next := func(ctx context.Context) (err error) {
		tokB, err = acquire(ctx, env.Other, name, b, longTTL)
		return err
	}
	call := fmt.Sprintf("Release(%q)", name)
	callErr, err := faultkit.LoseReply(ctx, env.Proxy, call,
		func(ctx context.Context) error { return env.Backend.Release(ctx, name, a) },
		func(ctx context.Context) (bool, error) {
			info, err := env.Other.Inspect(ctx, name)
			return err == nil && !info.Held, err
		}, next)
	if err != nil {
		return err
	}
	if errors.Is(callErr, lock.ErrNotHeld) || errors.Is(callErr, fence.ErrInvalid) {
		return fmt.Errorf("%s, whose reply was lost after the server released the lock: %v. The client sent it again after the next holder took the lock, and told its caller that it did not hold a lock it released; a Release must be sent once and return the network error", call, callErr)
	}
	return first(
		expectHolder(ctx, env.Other, name, b, tokB),
		expectIs("Release retried after the next holder took the lock", env.Backend.Release(ctx, name, a), lock.ErrNotHeld),
		expectHolder(ctx, env.Other, name, b, tokB),
	)
}

func checkExtendLostReply(ctx context.Context, env FaultEnv) error {
	name, a := env.NS+"lock", owner()
	if err := warmUp(ctx, env, a); err != nil {
		return err
	}
	tok, err := acquire(ctx, env.Backend, name, a, longTTL)
	if err != nil {
		return err
	}
	const extended = 2 * time.Minute
	call := fmt.Sprintf("Extend(%q, %v)", name, extended)
	callErr, err := faultkit.LoseReply(ctx, env.Proxy, call,
		func(ctx context.Context) error { return env.Backend.Extend(ctx, name, a, extended) },
		func(ctx context.Context) (bool, error) {
			info, err := env.Other.Inspect(ctx, name)
			return err == nil && info.TTL > extended/4, err
		}, nil)
	if err != nil {
		return err
	}
	if errors.Is(callErr, lock.ErrNotHeld) || errors.Is(callErr, fence.ErrInvalid) {
		return fmt.Errorf("%s, whose reply was lost after the server extended the lease: %v; its owner still holds it", call, callErr)
	}
	if err := env.Backend.Extend(ctx, name, a, extended); err != nil {
		return fmt.Errorf("%s retried after its reply was lost (first call: %v): %v; want it renewed", call, callErr, err)
	}
	return expectHolder(ctx, env.Other, name, a, tok)
}

func checkAcquireCut(ctx context.Context, env FaultEnv) error {
	name, a := env.NS+"lock", owner()
	if err := warmUp(ctx, env, a); err != nil {
		return err
	}
	call := fmt.Sprintf("Acquire(%q)", name)
	callErr, err := faultkit.CutInFlight(ctx, env.Proxy, call,
		func(ctx context.Context) error { _, err := env.Backend.Acquire(ctx, name, a, longTTL); return err })
	if err != nil {
		return err
	}
	switch {
	case callErr == nil:
		return fmt.Errorf("%s, cut before it reached the server, with new connections refused: succeeded", call)
	case errors.Is(callErr, lock.ErrHeld):
		return fmt.Errorf("%s with its connection cut: %v; nobody holds the lock", call, callErr)
	case !lock.Retryable(callErr):
		return fmt.Errorf("%s with its connection cut: %v, for which lock.Retryable is false; Client.Acquire would give up instead of retrying a network failure", call, callErr)
	}
	if err := expectFree(ctx, env.Other, name); err != nil {
		return err
	}
	tok, err := env.Backend.Acquire(ctx, name, a, longTTL)
	if err != nil {
		return fmt.Errorf("%s on the healed network: %w", call, err)
	}
	return expectHolder(ctx, env.Other, name, a, tok)
}

func checkLockDelayPastDeadline(ctx context.Context, env FaultEnv) error {
	name, a := env.NS+"lock", owner()
	if err := warmUp(ctx, env, a); err != nil {
		return err
	}
	if _, err := faultkit.PastDeadline(ctx, env.Proxy, fmt.Sprintf("Acquire(%q)", name),
		func(ctx context.Context) error { _, err := env.Backend.Acquire(ctx, name, a, longTTL); return err }); err != nil {
		return err
	}
	// The late Acquire may have taken the lock; the retry by the same
	// owner gets that lease or a new one.
	tok, err := env.Backend.Acquire(ctx, name, a, longTTL)
	if err != nil {
		return fmt.Errorf("Acquire(%q) retried after its deadline: %w", name, err)
	}
	if err := expectHolder(ctx, env.Other, name, a, tok); err != nil {
		return err
	}
	if _, err := faultkit.PastDeadline(ctx, env.Proxy, fmt.Sprintf("Release(%q)", name),
		func(ctx context.Context) error { return env.Backend.Release(ctx, name, a) }); err != nil {
		return err
	}
	// The late Release may have landed: a retry then answers ErrNotHeld.
	if err := env.Backend.Release(ctx, name, a); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("Release(%q) retried after its deadline: %w", name, err)
	}
	if err := expectFree(ctx, env.Other, name); err != nil {
		return err
	}
	next, err := acquire(ctx, env.Other, name, owner(), longTTL)
	if err != nil {
		return err
	}
	if next <= tok {
		return fmt.Errorf("Acquire(%q) after the release: token %d; want above %d", name, next, tok)
	}
	return nil
}
