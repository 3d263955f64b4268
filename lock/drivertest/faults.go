package drivertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// NewNetBackend builds the backend under test for RunFaults. It must make
// every network connection with dial (go-redis: Options.Dialer; pgx:
// ConnConfig.DialFunc), to the server address given to RunFaults, and use
// the client library's default options unless the test means otherwise.
// Every backend it returns for one test must share the same data. Close the
// client in t.Cleanup.
type NewNetBackend func(t *testing.T, dial faultproxy.DialFunc) driver.Backend

// FaultOptions tells the fault kit how many requests the backend sends
// before the one that makes a grant, so that a lost-reply check loses the
// reply to that one. The zero value (and a nil *FaultOptions) suits a
// backend whose every Acquire is one request. Counting them needs a client
// that sends each request in one piece (see
// faultproxy.Proxy.HoldRepliesAfter).
type FaultOptions struct {
	// RequestsBeforeAcquire is how many requests the backend sends, each
	// waiting for its reply, before the request that takes the lock, in
	// an Acquire of one name it has not seen (a read of the lease, say),
	// and in a resume.
	RequestsBeforeAcquire int
	// RequestsBeforeSet is the same for an Acquire of a set of names (a
	// transaction's BEGIN and statements before its COMMIT).
	RequestsBeforeSet int
	// RequestsBeforePermit is the same for an Acquire of a permit.
	RequestsBeforePermit int
}

// FaultEnv is what one fault check runs against.
type FaultEnv struct {
	// Backend is the backend under test. Its connections go through Proxy.
	Backend driver.Backend
	// Proxy sits between Backend and the server and injects the faults.
	Proxy *faultproxy.Proxy
	// Other is a second backend on the same data, over a healthy network:
	// the next holder, and the observer of what the server executed.
	Other driver.Backend
	// NS starts every name the check uses.
	NS string
	// FaultOptions describes Backend's requests.
	FaultOptions
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

// RunFaults runs every fault check (FaultChecks) as a subtest of t against
// a network backend. Each check starts a faultproxy.Proxy in front of addr
// (the server's host:port) and calls newBackend twice: once with the
// proxy's Dial for the backend under test, once with a plain dialer for a
// second backend that plays the next holder and observes the server. opts
// says how many requests the backend sends before the one that grants; nil
// means one request per Acquire.
//
// The checks: an Acquire whose reply is lost after the server took the lock,
// retried by the same owner, gets the same token and lease, never ErrHeld;
// a Release whose reply is lost is not sent again by the client (a resend
// would answer ErrNotHeld, or release the next holder's lease in a backend
// without an owner check); an Extend whose reply is lost can be retried; an
// Acquire whose connection is cut gives an error Client.Acquire retries
// (driver.Retryable), not a hang; Acquire and Release with replies delayed
// past the context's deadline return an error matching
// context.DeadlineExceeded at about that deadline, and nothing is lost; a
// resume, a set and a permit whose replies are lost, retried, keep their
// tokens; a queued permit request whose reply is lost, retried, keeps one
// place in line.
//
// A check in which the backend answered driver.ErrUnsupported is skipped as
// a gap, as in Run, and RunFaults logs the gaps at the end.
func RunFaults(t *testing.T, addr string, newBackend NewNetBackend, opts *FaultOptions) {
	t.Helper()
	logGaps(t, runFaults(t, addr, newBackend, opts))
}

// runFaults is RunFaults; it returns the gaps.
func runFaults(t *testing.T, addr string, newBackend NewNetBackend, opts *FaultOptions) []gap {
	t.Helper()
	var o FaultOptions
	if opts != nil {
		o = *opts
	}
	checks := FaultChecks()
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.Name
	}
	var gaps []gap
	faultkit.RunEach(t, addr, FaultTimeout, names,
		func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) faultRun {
			b := watch(newBackend(t, p.Dial))
			env := FaultEnv{Backend: b, Proxy: p, Other: newBackend(t, plain), NS: Namespace(), FaultOptions: o}
			return faultRun{t: t, env: env, watched: b}
		},
		func(ctx context.Context, i int, r faultRun) error {
			r.t.Cleanup(func() {
				if shape := r.watched.refused(); shape != "" && r.t.Skipped() {
					gaps = append(gaps, gap{check: checks[i].Name, shape: shape})
				}
			})
			err := checks[i].Run(ctx, r.env)
			if shape := r.watched.refused(); shape != "" {
				r.t.Skipf("gap: %s: the backend answers driver.ErrUnsupported", shape)
			}
			return err
		})
	return gaps
}

// faultRun is one fault check's environment, with its subtest and the
// watched backend under test, for the gaps.
type faultRun struct {
	t       *testing.T
	env     FaultEnv
	watched *watched
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
		{"ResumeLostReplyRetriedSameToken", checkResumeLostReply},
		{"SetLostReplyRetriedSameTokens", checkSetLostReply},
		{"PermitAcquireLostReplyRetriedSameToken", checkPermitAcquireLostReply},
		{"PermitQueueLostReplyKeepsOnePlace", checkPermitQueueLostReply},
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
	if err := extend(ctx, env.Backend, warm, owner, longTTL); err != nil {
		return fmt.Errorf("Extend(%q) while held: %w", warm, err)
	}
	if _, err := inspect(ctx, env.Backend, warm); err != nil {
		return err
	}
	if err := release(ctx, env.Backend, warm, owner); err != nil {
		return fmt.Errorf("Release(%q) while held: %w", warm, err)
	}
	return nil
}

// heldBy returns a condition that holds once the observer sees name held by
// owner, and records its token in tok.
func heldBy(b driver.Backend, name, owner string, tok *fence.Token) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		info, err := inspect(ctx, b, name)
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
			got, err = take(ctx, env.Backend, name, a, longTTL)
			return err
		},
		heldBy(env.Other, name, a, &landed), nil)
	if err != nil {
		return err
	}
	switch {
	case errors.Is(callErr, driver.ErrHeld):
		return fmt.Errorf("%s, whose reply was lost after the server took the lock for its owner: %v. The resend locked its own caller out; an Acquire by the holding owner must return its token", call, callErr)
	case callErr == nil && got != landed:
		return fmt.Errorf("%s with its reply lost returned token %d; the server minted %d", call, got, landed)
	}
	retry, err := take(ctx, env.Backend, name, a, longTTL)
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
		func(ctx context.Context) error { return release(ctx, env.Backend, name, a) },
		func(ctx context.Context) (bool, error) {
			info, err := inspect(ctx, env.Other, name)
			return err == nil && !info.Held, err
		}, next)
	if err != nil {
		return err
	}
	if errors.Is(callErr, driver.ErrNotHeld) || errors.Is(callErr, fence.ErrInvalid) {
		return fmt.Errorf("%s, whose reply was lost after the server released the lock: %v. The client sent it again after the next holder took the lock, and told its caller that it did not hold a lock it released; a Release must be sent once and return the network error", call, callErr)
	}
	return first(
		expectHolder(ctx, env.Other, name, b, tokB),
		expectIs("Release retried after the next holder took the lock", release(ctx, env.Backend, name, a), driver.ErrNotHeld),
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
		func(ctx context.Context) error { return extend(ctx, env.Backend, name, a, extended) },
		func(ctx context.Context) (bool, error) {
			info, err := inspect(ctx, env.Other, name)
			return err == nil && info.TTL > extended/4, err
		}, nil)
	if err != nil {
		return err
	}
	if errors.Is(callErr, driver.ErrNotHeld) || errors.Is(callErr, fence.ErrInvalid) {
		return fmt.Errorf("%s, whose reply was lost after the server extended the lease: %v; its owner still holds it", call, callErr)
	}
	if err := extend(ctx, env.Backend, name, a, extended); err != nil {
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
		func(ctx context.Context) error { _, err := take(ctx, env.Backend, name, a, longTTL); return err })
	if err != nil {
		return err
	}
	switch {
	case callErr == nil:
		return fmt.Errorf("%s, cut before it reached the server, with new connections refused: succeeded", call)
	case errors.Is(callErr, driver.ErrHeld):
		return fmt.Errorf("%s with its connection cut: %v; nobody holds the lock", call, callErr)
	case !driver.Retryable(callErr):
		return fmt.Errorf("%s with its connection cut: %v, for which driver.Retryable is false; Client.Acquire would give up instead of retrying a network failure", call, callErr)
	}
	if err := expectFree(ctx, env.Other, name); err != nil {
		return err
	}
	tok, err := take(ctx, env.Backend, name, a, longTTL)
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
		func(ctx context.Context) error { _, err := take(ctx, env.Backend, name, a, longTTL); return err }); err != nil {
		return err
	}
	// The late Acquire may have taken the lock; the retry by the same
	// owner gets that lease or a new one.
	tok, err := take(ctx, env.Backend, name, a, longTTL)
	if err != nil {
		return fmt.Errorf("Acquire(%q) retried after its deadline: %w", name, err)
	}
	if err := expectHolder(ctx, env.Other, name, a, tok); err != nil {
		return err
	}
	if _, err := faultkit.PastDeadline(ctx, env.Proxy, fmt.Sprintf("Release(%q)", name),
		func(ctx context.Context) error { return release(ctx, env.Backend, name, a) }); err != nil {
		return err
	}
	// The late Release may have landed: a retry then answers ErrNotHeld.
	if err := release(ctx, env.Backend, name, a); err != nil && !errors.Is(err, driver.ErrNotHeld) {
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
