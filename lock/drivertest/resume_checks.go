package drivertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// resumedTTL is the TTL a check resumes a lease with: longer than the
// longTTL it was acquired with, so that a Resume that does not renew the
// lease is seen in its remaining TTL.
const resumedTTL = 3 * longTTL

// resumeChecks are the checks of resuming a lease (Request.Resume) on the
// driver, and of Client.Resume and ResumeDo over it. They catch the obvious broken
// implementations: a resumed lease with a new token, a Resume that does not
// renew, that re-creates a released or expired lease, that adopts another
// owner's lease or renews it, or that replaces the holder metadata.
func resumeChecks() []Check {
	return []Check{
		{"ResumeKeepsTokenAndRenews", checkResumeKeepsToken},
		{"ResumeReleasedIsNotHeld", checkResumeReleased},
		{"ResumeExpiredIsNotHeld", checkResumeExpired},
		{"ResumeOtherOwnerIsNotHeld", checkResumeOtherOwner},
		{"ResumeAfterReacquireGetsNewToken", checkResumeReacquired},
		{"ResumeKeepsMetadata", checkResumeMetadata},
		{"ResumeIsOneStep", checkResumeOneStep},
		{"ResumeRefusesBadInput", checkResumeInvalid},
		{"ResumeHonoursContext", checkResumeContext},
		{"ClientResumeContinuesLease", checkClientResume},
		{"ClientResumeKeepsAlive", checkClientResumeKeepAlive},
		{"ResumeDoRunsAndReleases", checkResumeDo},
	}
}

// resumeRequest asks to adopt owner's live lease on the lock name.
func resumeRequest(name, owner string, ttl time.Duration) driver.Request {
	req := lockRequest(name, owner, ttl)
	req.Resume = true
	return req
}

// resume asks b to adopt owner's live lease on name, renewed to ttl.
func resume(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, resumeRequest(name, owner, ttl))
	return g.Token, err
}

// resumeNotHeld fails unless Resume by o is refused with ErrNotHeld.
func resumeNotHeld(ctx context.Context, b driver.Backend, name, o, what string) error {
	tok, err := resume(ctx, b, name, o, resumedTTL)
	if err == nil {
		return fmt.Errorf("Resume(%q) %s: adopted a lease with token %d; want an error matching ErrNotHeld", name, what, tok)
	}
	return expectIs(fmt.Sprintf("Resume(%q) %s", name, what), err, driver.ErrNotHeld)
}

// checkResumeKeepsToken: Resume by the holder returns its token and renews
// the lease to the TTL it asks for, longer or shorter than the lease had.
func checkResumeKeepsToken(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	for _, ttl := range []time.Duration{resumedTTL, longTTL / 2} {
		var got fence.Token
		w := timed(func() { got, err = resume(ctx, b, name, a, ttl) })
		if err != nil {
			return fmt.Errorf("Resume(%q, %v) by the holder: %w", name, ttl, err)
		}
		if got != tok {
			return fmt.Errorf("Resume(%q, %v) by the holder returned token %d; want %d, the lease's own: a resumed lease keeps its token", name, ttl, got, tok)
		}
		if err := expectLease(ctx, b, name, a, tok, ttl, w); err != nil {
			return fmt.Errorf("after Resume(%q, %v): %w", name, ttl, err)
		}
	}
	if err := release(ctx, b, name, a); err != nil {
		return fmt.Errorf("Release of the resumed lease: %w", err)
	}
	return expectFree(ctx, b, name)
}

// checkResumeReleased: a released lease cannot be resumed, and the refused
// Resume does not re-create it.
func checkResumeReleased(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if err := release(ctx, b, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := resumeNotHeld(ctx, b, name, a, "after its owner released it"); err != nil {
		return err
	}
	if err := expectFree(ctx, b, name); err != nil {
		return fmt.Errorf("after a refused Resume of a released lease: %w", err)
	}
	next, err := acquire(ctx, b, name, owner(), longTTL)
	if err != nil {
		return err
	}
	if next <= tok {
		return fmt.Errorf("Acquire(%q) after a refused Resume: token %d; want above %d", name, next, tok)
	}
	return nil
}

// checkResumeExpired: an expired lease cannot be resumed, and the refused
// Resume does not re-create it.
func checkResumeExpired(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	ttl := max(shortTTL, granularity(ctx))
	_, w, err := acquireTimed(ctx, b, name, a, ttl)
	if err != nil {
		return err
	}
	if _, err := waitExpiry(ctx, b, name, w.call, ttl); err != nil {
		return err
	}
	if err := resumeNotHeld(ctx, b, name, a, "after its lease expired"); err != nil {
		return err
	}
	if err := expectFree(ctx, b, name); err != nil {
		return fmt.Errorf("after a refused Resume of an expired lease: %w", err)
	}
	return nil
}

// checkResumeOtherOwner: Resume by an owner that does not hold the lock is
// refused, and leaves the holder's lease as it was: same token, same TTL.
func checkResumeOtherOwner(ctx context.Context, b driver.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if err := resumeNotHeld(ctx, b, name, c, "by an owner that never held it"); err != nil {
		return err
	}
	if err := expectLease(ctx, b, name, a, tok, longTTL, w); err != nil {
		return fmt.Errorf("after another owner's refused Resume: %w", err)
	}
	// A free name is refused too, and stays free.
	free := ns + "free"
	return first(
		resumeNotHeld(ctx, b, free, a, "of a lock nobody ever held"),
		expectFree(ctx, b, free),
	)
}

// checkResumeReacquired: an owner that released its lease and took the lock
// again resumes the new lease, with the new token, never the old one.
func checkResumeReacquired(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	old, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if got, err := resume(ctx, b, name, a, longTTL); err != nil || got != old {
		return fmt.Errorf("Resume(%q) by the holder = %d, %v; want %d", name, got, err, old)
	}
	if err := release(ctx, b, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if tok <= old {
		return fmt.Errorf("Acquire(%q) again by the same owner: token %d; want above %d", name, tok, old)
	}
	got, err := resume(ctx, b, name, a, longTTL)
	if err != nil {
		return fmt.Errorf("Resume(%q) of the owner's new lease: %w", name, err)
	}
	if got != tok {
		return fmt.Errorf("Resume(%q) of the owner's new lease returned token %d; want %d (the old lease had %d)", name, got, tok, old)
	}
	return expectHolder(ctx, b, name, a, tok)
}

// Rounds of ResumeIsOneStep.
const oneStepRounds = 12

// checkResumeOneStep: a Resume is one atomic step, so the token it returns
// is that of the lease it renewed. Round after round, a Resume runs while
// its owner releases the lease and takes the lock again (a new lease, a
// new token), started a little later each round so that the two meet at
// every point of the Resume's round trip. Each Resume either came first
// (the old token; the new lease not renewed), fell between (ErrNotHeld) or
// came last (the new token, the new lease renewed); a Resume that returns
// the old token while the new lease was renewed, or the new token while
// the new lease was not, did its work in two steps.
func checkResumeOneStep(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	// How long a Resume takes here: the span the rounds spread over.
	var rtt time.Duration
	for range 3 {
		w := timed(func() { _, err = resume(ctx, b, name, a, longTTL) })
		if err != nil {
			return fmt.Errorf("Resume(%q) by the holder: %w", name, err)
		}
		rtt = max(rtt, w.ret.Sub(w.call))
	}
	// A lease renewed by a Resume outlives every one taken with longTTL.
	renewedAbove := longTTL + granularity(ctx) + tolerance
	for i := range oneStepRounds {
		type result struct {
			tok fence.Token
			err error
		}
		done := make(chan result, 1)
		go func() {
			got, err := resume(ctx, b, name, a, resumedTTL)
			done <- result{got, err}
		}()
		if err := sleep(ctx, rtt*time.Duration(i)/(oneStepRounds/2)); err != nil {
			return err
		}
		if err := release(ctx, b, name, a); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			return fmt.Errorf("Release: %w", err)
		}
		next, err := acquire(ctx, b, name, a, longTTL)
		if err != nil {
			return err
		}
		r := <-done
		info, err := inspect(ctx, b, name)
		if err != nil {
			return err
		}
		if info.Owner != a || info.Token != next {
			return fmt.Errorf("Inspect(%q) = %+v; want held by %q with token %d", name, info, a, next)
		}
		renewed := info.TTL > renewedAbove
		switch {
		case r.err != nil:
			if err := expectIs(fmt.Sprintf("Resume(%q) while its owner released and took the lock again", name), r.err, driver.ErrNotHeld); err != nil {
				return err
			}
			if renewed {
				return fmt.Errorf("Resume(%q) = %v, yet the new lease (token %d) was renewed to %v: a refused Resume must change nothing", name, r.err, next, info.TTL)
			}
		case r.tok == tok && renewed:
			return fmt.Errorf("Resume(%q) returned token %d, the old lease's, but renewed the new lease (token %d, TTL %v, taken for %v): a Resume must return the token of the lease it renews, in one atomic step", name, r.tok, next, info.TTL, longTTL)
		case r.tok == next && !renewed:
			return fmt.Errorf("Resume(%q) returned token %d, the new lease's, but left it as taken (TTL %v, taken for %v; the resume asked for %v): a Resume must renew the lease whose token it returns, in one atomic step", name, r.tok, info.TTL, longTTL, resumedTTL)
		case r.tok != tok && r.tok != next:
			return fmt.Errorf("Resume(%q) returned token %d; the owner's leases had %d and %d", name, r.tok, tok, next)
		}
		// A Resume that came last renewed the new lease; the next round
		// starts from a lease taken for longTTL again.
		if err := extend(ctx, b, name, a, longTTL); err != nil {
			return fmt.Errorf("Extend: %w", err)
		}
		tok = next
	}
	return release(ctx, b, name, a)
}

// checkResumeMetadata: Resume keeps the holder metadata the lease was
// acquired with, as Extend does, even when its context carries other
// metadata.
func checkResumeMetadata(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	if err := acquireWith(ctx, b, name, a, "acquirer", longTTL); err != nil {
		return err
	}
	if err := expectMetadata(ctx, b, name, "acquirer"); err != nil {
		return fmt.Errorf("after Acquire with metadata: %w", err)
	}
	if _, err := b.Acquire(ctx, withMetadata(resumeRequest(name, a, longTTL), "resumer")); err != nil {
		return fmt.Errorf("Resume(%q) by the holder: %w", name, err)
	}
	if err := expectMetadata(ctx, b, name, "acquirer"); err != nil {
		return fmt.Errorf("after a Resume with other metadata (Resume keeps what Acquire stored, as Extend does): %w", err)
	}
	return nil
}

// checkResumeInvalid: bad input to Client.Resume is refused with
// ErrInvalid before anything is sent, and changes nothing.
func checkResumeInvalid(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	cb := &counted{Backend: b}
	c := lock.New(cb, nil)
	var calls []refusedCall
	for _, bad := range []struct {
		what        string
		name, owner string
		ttl         time.Duration
	}{
		{"an empty name", "", a, resumedTTL},
		{"an empty owner", name, "", resumedTTL},
		{"a name with a NUL byte", name + "\x00", a, resumedTTL},
		{"an owner that is not UTF-8", name, a + "\xff", resumedTTL},
		{"a ttl below driver.MinTTL", name, a, driver.MinTTL - 1},
		{"a zero ttl", name, a, 0},
	} {
		calls = append(calls,
			refusedCall{"Client.Resume with " + bad.what, func() error { _, err := c.Resume(ctx, bad.name, bad.owner, bad.ttl); return err }},
			refusedCall{"Client.ResumeDo with " + bad.what, func() error {
				return c.ResumeDo(ctx, bad.name, bad.owner, bad.ttl, func(context.Context, *lock.Lease) error { return nil })
			}},
		)
	}
	if err := expectRefused(cb, calls); err != nil {
		return err
	}
	return expectLease(ctx, b, name, a, tok, longTTL, w)
}

// checkResumeContext: Resume under a context already cancelled, or past its
// deadline, fails and changes nothing.
func checkResumeContext(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for what, c := range map[string]context.Context{"cancelled": cancelled, "past its deadline": expired} {
		if got, err := resume(c, b, name, a, resumedTTL); err == nil {
			return fmt.Errorf("Resume(%q) with a context %s: token %d, no error; want the context's error", name, what, got)
		}
	}
	return expectLease(ctx, b, name, a, tok, longTTL, w)
}

// checkClientResume: a second Client resumes a lease by its name and owner
// and gets the same token; after the release, Resume is refused with
// ErrNotHeld and ErrNotAcquired and the lock stays free.
func checkClientResume(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	prev, err := lock.New(b, nil).TryAcquire(ctx, name, longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	// The first holder "restarts": its lease object is abandoned, its owner
	// value saved.
	saved := prev.Owner()
	c := lock.New(b, nil)
	l, err := c.Resume(ctx, name, saved, longTTL)
	if err != nil {
		return fmt.Errorf("Client.Resume by the saved owner: %w", err)
	}
	if l.Token() != prev.Token() || l.Owner() != saved || l.Name() != name {
		return fmt.Errorf("Client.Resume: lease %q owner %q token %d; want %q owner %q token %d", l.Name(), l.Owner(), l.Token(), name, saved, prev.Token())
	}
	if err := l.Extend(ctx, longTTL); err != nil {
		return fmt.Errorf("Extend of the resumed lease: %w", err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("Release of the resumed lease: %w", err)
	}
	if err := expectFree(ctx, b, name); err != nil {
		return err
	}
	_, err = c.Resume(ctx, name, saved, longTTL)
	return first(
		expectIs("Client.Resume after the release", err, lock.ErrNotHeld),
		expectIs("Client.Resume after the release", err, lock.ErrNotAcquired),
		expectFree(ctx, b, name),
	)
}

// checkClientResumeKeepsAlive: a resumed lease with keep-alive is renewed
// across several TTLs, with its token.
func checkClientResumeKeepAlive(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	// A second between renewals' deadlines: wide margins on a loaded machine.
	ttl := max(time.Second, granularity(ctx))
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	extended := make(chan struct{}, 64)
	c := lock.New(b, &lock.Options{Observer: &lock.Observer{Extended: func(lock.Event) {
		select {
		case extended <- struct{}{}:
		default:
		}
	}}})
	l, err := c.Resume(ctx, name, a, ttl, lock.WithKeepAlive(true))
	if err != nil {
		return fmt.Errorf("Client.Resume with keep-alive: %w", err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	for i := 0; i < 6; i++ { // two TTLs at the default interval
		select {
		case <-extended:
		case <-l.Done():
			return fmt.Errorf("resumed lease lost after %d renewals: %v", i, l.Err())
		case <-time.After(waitFor):
			return fmt.Errorf("no renewal of the resumed lease within %v after %d renewals", waitFor, i)
		}
	}
	if err := expectHolder(ctx, b, name, a, tok); err != nil {
		return err
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	return expectFree(ctx, b, name)
}

// checkResumeDo: ResumeDo runs fn under the resumed lease, with its token,
// and releases it; on a lease not held it does not run fn.
func checkResumeDo(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	c := lock.New(b, nil)
	var got fence.Token
	err = c.ResumeDo(ctx, name, a, longTTL, func(fnCtx context.Context, l *lock.Lease) error {
		got = l.Token()
		return expectHolder(fnCtx, b, name, a, tok)
	})
	if err != nil {
		return fmt.Errorf("ResumeDo: %w", err)
	}
	if got != tok {
		return fmt.Errorf("ResumeDo ran fn with token %d; want %d", got, tok)
	}
	if err := expectFree(ctx, b, name); err != nil {
		return fmt.Errorf("after ResumeDo: %w", err)
	}
	ran := false
	err = c.ResumeDo(ctx, name, a, longTTL, func(context.Context, *lock.Lease) error { ran = true; return nil })
	if ran {
		return fmt.Errorf("ResumeDo of a released lease ran fn")
	}
	return first(expectIs("ResumeDo of a released lease", err, lock.ErrNotHeld), expectFree(ctx, b, name))
}
