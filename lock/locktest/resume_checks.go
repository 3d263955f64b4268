package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// resumedTTL is the TTL a check resumes a lease with: longer than the
// longTTL it was acquired with, so that a Resume that does not renew the
// lease is seen in its remaining TTL.
const resumedTTL = 3 * longTTL

// ResumeChecks returns the checks of the optional capability lock.Resumer:
// the backend's Resume and Client.Resume and ResumeDo over it. Each fails at
// once on a backend without it. They catch the obvious broken
// implementations: a resumed lease with a new token, a Resume that does not
// renew, that re-creates a released or expired lease, that adopts another
// owner's lease or renews it, or that replaces the holder metadata.
func ResumeChecks() []Check {
	return []Check{
		{"ResumeKeepsTokenAndRenews", checkResumeKeepsToken},
		{"ResumeReleasedIsNotHeld", checkResumeReleased},
		{"ResumeExpiredIsNotHeld", checkResumeExpired},
		{"ResumeOtherOwnerIsNotHeld", checkResumeOtherOwner},
		{"ResumeAfterReacquireGetsNewToken", checkResumeReacquired},
		{"ResumeKeepsMetadata", checkResumeMetadata},
		{"ResumeRefusesBadInput", checkResumeInvalid},
		{"ResumeHonoursContext", checkResumeContext},
		{"ClientResumeContinuesLease", checkClientResume},
		{"ClientResumeKeepsAlive", checkClientResumeKeepAlive},
		{"ResumeDoRunsAndReleases", checkResumeDo},
	}
}

// RunResume runs ResumeChecks as subtests of t. Run calls it when the
// backend that newBackend returns implements lock.Resumer, so a backend that
// opts in is checked without a line of its own.
func RunResume(t *testing.T, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	runChecks(t, ResumeChecks(), newBackend)
}

func asResumer(b lock.Backend) (lock.Resumer, error) {
	r, ok := b.(lock.Resumer)
	if !ok {
		return nil, fmt.Errorf("%T does not implement lock.Resumer", b)
	}
	return r, nil
}

// resumeNotHeld fails unless Resume by o is refused with ErrNotHeld.
func resumeNotHeld(ctx context.Context, r lock.Resumer, name, o, what string) error {
	tok, err := r.Resume(ctx, name, o, resumedTTL)
	if err == nil {
		return fmt.Errorf("Resume(%q) %s: adopted a lease with token %d; want an error matching ErrNotHeld", name, what, tok)
	}
	return expectIs(fmt.Sprintf("Resume(%q) %s", name, what), err, lock.ErrNotHeld)
}

// checkResumeKeepsToken: Resume by the holder returns its token and renews
// the lease to the TTL it asks for, longer or shorter than the lease had.
func checkResumeKeepsToken(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	for _, ttl := range []time.Duration{resumedTTL, longTTL / 2} {
		var got fence.Token
		w := timed(func() { got, err = r.Resume(ctx, name, a, ttl) })
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
	if err := b.Release(ctx, name, a); err != nil {
		return fmt.Errorf("Release of the resumed lease: %w", err)
	}
	return expectFree(ctx, b, name)
}

// checkResumeReleased: a released lease cannot be resumed, and the refused
// Resume does not re-create it.
func checkResumeReleased(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if err := b.Release(ctx, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := resumeNotHeld(ctx, r, name, a, "after its owner released it"); err != nil {
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
func checkResumeExpired(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
	name, a := ns+"l", owner()
	ttl := max(shortTTL, granularity(b))
	_, w, err := acquireTimed(ctx, b, name, a, ttl)
	if err != nil {
		return err
	}
	if _, err := waitExpiry(ctx, b, name, w.call, ttl); err != nil {
		return err
	}
	if err := resumeNotHeld(ctx, r, name, a, "after its lease expired"); err != nil {
		return err
	}
	if err := expectFree(ctx, b, name); err != nil {
		return fmt.Errorf("after a refused Resume of an expired lease: %w", err)
	}
	return nil
}

// checkResumeOtherOwner: Resume by an owner that does not hold the lock is
// refused, and leaves the holder's lease as it was: same token, same TTL.
func checkResumeOtherOwner(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
	name, a, c := ns+"l", owner(), owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if err := resumeNotHeld(ctx, r, name, c, "by an owner that never held it"); err != nil {
		return err
	}
	if err := expectLease(ctx, b, name, a, tok, longTTL, w); err != nil {
		return fmt.Errorf("after another owner's refused Resume: %w", err)
	}
	// A free name is refused too, and stays free.
	free := ns + "free"
	return first(
		resumeNotHeld(ctx, r, free, a, "of a lock nobody ever held"),
		expectFree(ctx, b, free),
	)
}

// checkResumeReacquired: an owner that released its lease and took the lock
// again resumes the new lease, with the new token, never the old one.
func checkResumeReacquired(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
	name, a := ns+"l", owner()
	old, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if got, err := r.Resume(ctx, name, a, longTTL); err != nil || got != old {
		return fmt.Errorf("Resume(%q) by the holder = %d, %v; want %d", name, got, err, old)
	}
	if err := b.Release(ctx, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	if tok <= old {
		return fmt.Errorf("Acquire(%q) again by the same owner: token %d; want above %d", name, tok, old)
	}
	got, err := r.Resume(ctx, name, a, longTTL)
	if err != nil {
		return fmt.Errorf("Resume(%q) of the owner's new lease: %w", name, err)
	}
	if got != tok {
		return fmt.Errorf("Resume(%q) of the owner's new lease returned token %d; want %d (the old lease had %d)", name, got, tok, old)
	}
	return expectHolder(ctx, b, name, a, tok)
}

// checkResumeMetadata: Resume keeps the holder metadata the lease was
// acquired with, as Extend does, even when its context carries other
// metadata.
func checkResumeMetadata(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
	name, a := ns+"l", owner()
	if _, err := acquire(lock.ContextWithMetadata(ctx, "acquirer"), b, name, a, longTTL); err != nil {
		return err
	}
	before, err := b.Inspect(ctx, name)
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if before.Metadata != "acquirer" && before.Metadata != "" {
		return fmt.Errorf("Inspect(%q) after Acquire with metadata %q: metadata %q; want that or none", name, "acquirer", before.Metadata)
	}
	if _, err := r.Resume(lock.ContextWithMetadata(ctx, "resumer"), name, a, longTTL); err != nil {
		return fmt.Errorf("Resume(%q) by the holder: %w", name, err)
	}
	after, err := b.Inspect(ctx, name)
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if after.Metadata != before.Metadata {
		return fmt.Errorf("Inspect(%q) after Resume: metadata %q; want %q, what Acquire stored (Resume keeps it, as Extend does)", name, after.Metadata, before.Metadata)
	}
	return nil
}

// checkResumeInvalid: bad input is refused with ErrInvalid and changes
// nothing.
func checkResumeInvalid(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	calls := []struct {
		what        string
		name, owner string
		ttl         time.Duration
	}{
		{"an empty name", "", a, resumedTTL},
		{"an empty owner", name, "", resumedTTL},
		{"a name with a NUL byte", name + "\x00", a, resumedTTL},
		{"an owner that is not UTF-8", name, a + "\xff", resumedTTL},
		{"a ttl below lock.MinTTL", name, a, lock.MinTTL - 1},
		{"a zero ttl", name, a, 0},
	}
	for _, c := range calls {
		_, err := r.Resume(ctx, c.name, c.owner, c.ttl)
		if !errors.Is(err, lock.ErrInvalid) {
			return fmt.Errorf("Resume with %s: error %v; want one matching ErrInvalid", c.what, err)
		}
	}
	return expectLease(ctx, b, name, a, tok, longTTL, w)
}

// checkResumeContext: Resume under a context already cancelled, or past its
// deadline, fails and changes nothing.
func checkResumeContext(ctx context.Context, b lock.Backend, ns string) error {
	r, err := asResumer(b)
	if err != nil {
		return err
	}
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
		if got, err := r.Resume(c, name, a, resumedTTL); err == nil {
			return fmt.Errorf("Resume(%q) with a context %s: token %d, no error; want the context's error", name, what, got)
		}
	}
	return expectLease(ctx, b, name, a, tok, longTTL, w)
}

// checkClientResume: a second Client resumes a lease by its name and owner
// and gets the same token; after the release, Resume is refused with
// ErrNotHeld and ErrNotAcquired and the lock stays free.
func checkClientResume(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asResumer(b); err != nil {
		return err
	}
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
func checkClientResumeKeepAlive(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asResumer(b); err != nil {
		return err
	}
	name, a := ns+"l", owner()
	// A second between renewals' deadlines: wide margins on a loaded machine.
	ttl := max(time.Second, granularity(b))
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	extended := make(chan struct{}, 64)
	c := lock.New(b, &lock.Options{Observer: func(e lock.Event) {
		if e.Kind == lock.EventExtended {
			select {
			case extended <- struct{}{}:
			default:
			}
		}
	}})
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
func checkResumeDo(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asResumer(b); err != nil {
		return err
	}
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
