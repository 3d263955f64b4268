package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock"
)

// PermitFaultChecks returns the fault checks of the optional capability
// lock.PermitBackend, which RunPermitFaults runs.
func PermitFaultChecks() []FaultCheck {
	return []FaultCheck{
		{"PermitAcquireLostReplyRetriedSameToken", checkPermitAcquireLostReply},
		{"PermitQueueLostReplyKeepsOnePlace", checkPermitQueueLostReply},
	}
}

// RunPermitFaults runs PermitFaultChecks as subtests of t, as RunFaults
// runs its checks (newBackend as there). requestsBeforePermit is how many
// requests the backend's AcquirePermit sends, each waiting for its reply,
// before the one that makes the grant (FaultEnv.RequestsBeforePermit): 0
// for a backend whose AcquirePermit is one request.
func RunPermitFaults(t *testing.T, addr string, newBackend NewNetBackend, requestsBeforePermit int) {
	t.Helper()
	checks := PermitFaultChecks()
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.Name
	}
	faultkit.RunEach(t, addr, FaultTimeout, names,
		func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) FaultEnv {
			return FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, plain), NS: Namespace(), RequestsBeforePermit: requestsBeforePermit}
		},
		func(ctx context.Context, i int, env FaultEnv) error { return checks[i].Run(ctx, env) })
}

// warmPermits sends each permit call once through env.Backend (a
// connection in the pool, a script or statement cached), so that the call
// whose reply a check loses reaches the server while replies are held.
func warmPermits(ctx context.Context, env FaultEnv, pb lock.PermitBackend) error {
	name, o := env.NS+"warm-permit", owner()
	if _, err := pb.AcquirePermit(ctx, name, o, semaphoreReq(1, longTTL, 0)); err != nil {
		return fmt.Errorf("AcquirePermit(%q): %w", name, err)
	}
	if _, err := pb.AcquirePermit(ctx, name, owner(), semaphoreReq(1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("AcquirePermit(%q) with a place while held: %v; want ErrHeld", name, err)
	}
	if err := pb.ExtendPermit(ctx, name, o, longTTL); err != nil {
		return fmt.Errorf("ExtendPermit(%q): %w", name, err)
	}
	if _, err := pb.InspectPermits(ctx, name); err != nil {
		return fmt.Errorf("InspectPermits(%q): %w", name, err)
	}
	return pb.ReleasePermit(ctx, name, o)
}

// checkPermitAcquireLostReply: an AcquirePermit whose reply is lost after
// the server granted the permit, retried by the same owner, gets the same
// token, never ErrHeld, and the semaphore of one permit has one holder.
func checkPermitAcquireLostReply(ctx context.Context, env FaultEnv) error {
	pb, err := asPermits(env.Backend)
	if err != nil {
		return err
	}
	other, err := asPermits(env.Other)
	if err != nil {
		return err
	}
	if err := warmPermits(ctx, env, pb); err != nil {
		return err
	}
	name, a := env.NS+"sem", owner()
	call := fmt.Sprintf("AcquirePermit(%q)", name)
	var got lock.Permit
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforePermit, call,
		func(ctx context.Context) (err error) {
			got, err = pb.AcquirePermit(ctx, name, a, semaphoreReq(1, longTTL, 0))
			return err
		},
		func(ctx context.Context) (bool, error) {
			ps, err := other.InspectPermits(ctx, name)
			return err == nil && len(ps.Holders) > 0, err
		}, nil)
	if err != nil {
		return err
	}
	if errors.Is(callErr, lock.ErrHeld) {
		return fmt.Errorf("%s, whose reply was lost after the server granted it: %v; its owner holds the permit", call, callErr)
	}
	ps, err := other.InspectPermits(ctx, name)
	if err != nil {
		return err
	}
	if len(ps.Holders) != 1 || ps.Holders[0].Owner != a {
		return fmt.Errorf("after the lost reply: holders %+v; want owner %s alone", ps.Holders, a)
	}
	tok := ps.Holders[0].Token
	if callErr == nil && got.Token != tok {
		return fmt.Errorf("%s with its reply lost returned token %d; the permit has %d", call, got.Token, tok)
	}
	retry, err := pb.AcquirePermit(ctx, name, a, semaphoreReq(1, longTTL, 0))
	if err != nil {
		return fmt.Errorf("%s retried by the same owner after its reply was lost: %w; want the same permit", call, err)
	}
	if retry.Token != tok {
		return fmt.Errorf("%s retried after its reply was lost: token %d; want %d", call, retry.Token, tok)
	}
	return pb.ReleasePermit(ctx, name, a)
}

// checkPermitQueueLostReply: an AcquirePermit with a place, refused and
// queued, whose reply is lost, retried by the same owner, keeps one place:
// a waiter is never in line twice.
func checkPermitQueueLostReply(ctx context.Context, env FaultEnv) error {
	pb, err := asPermits(env.Backend)
	if err != nil {
		return err
	}
	other, err := asPermits(env.Other)
	if err != nil {
		return err
	}
	if err := warmPermits(ctx, env, pb); err != nil {
		return err
	}
	name, holder, w := env.NS+"sem", owner(), owner()
	if _, err := other.AcquirePermit(ctx, name, holder, semaphoreReq(1, longTTL, 0)); err != nil {
		return err
	}
	call := fmt.Sprintf("AcquirePermit(%q) with a place", name)
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforePermit, call,
		func(ctx context.Context) error {
			_, err := pb.AcquirePermit(ctx, name, w, semaphoreReq(1, longTTL, permitPlaceTTL))
			return err
		},
		func(ctx context.Context) (bool, error) {
			ps, err := other.InspectPermits(ctx, name)
			return err == nil && ps.Waiting > 0, err
		}, nil)
	if err != nil {
		return err
	}
	if callErr == nil {
		return fmt.Errorf("%s while the permit is held: granted", call)
	}
	if _, err := pb.AcquirePermit(ctx, name, w, semaphoreReq(1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("%s retried: %v; want ErrHeld", call, err)
	}
	ps, err := other.InspectPermits(ctx, name)
	if err != nil {
		return err
	}
	if ps.Waiting != 1 {
		return fmt.Errorf("one waiter whose queued reply was lost, retried: %d places; want 1", ps.Waiting)
	}
	if err := other.ReleasePermit(ctx, name, holder); err != nil {
		return err
	}
	if _, err := pb.AcquirePermit(ctx, name, w, semaphoreReq(1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the waiter after the release: %w", err)
	}
	return pb.ReleasePermit(ctx, name, w)
}
