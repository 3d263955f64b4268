package drivertest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// resumeFlaws are realistic bugs of a resume, one per field, each on top of
// the correct memory backend.
type resumeFlaws struct {
	newToken       bool // releases and acquires again: the lease gets a new token
	asAcquire      bool // is Acquire: re-creates a released or expired lease
	noRenew        bool // reads the token (Inspect) but does not renew the lease
	anyOwner       bool // adopts and renews whatever lease is there
	cachesToken    bool // remembers the first token it returned per name and owner
	ignoresCtx     bool // does not look at its context
	clampsTTL      bool // turns a TTL below MinTTL into MinTTL instead of refusing it
	replacesMDByAq bool // renews with a same-owner Acquire: replaces the metadata
	unsupported    bool // answers driver.ErrUnsupported: a backend without resume
}

// flawedResumer breaks the Acquire of a resume (Request.Resume) and passes
// every other request to the memory backend it embeds.
type flawedResumer struct {
	driver.Backend
	f resumeFlaws

	mu    sync.Mutex
	cache map[string]fence.Token
}

func (r *flawedResumer) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !req.Resume {
		return r.Backend.Acquire(ctx, req)
	}
	tok, err := r.resume(ctx, req)
	return driver.Grant{Token: tok}, err
}

func (r *flawedResumer) resume(ctx context.Context, req driver.Request) (fence.Token, error) {
	name, owner := req.Name, req.Owner
	claim := driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
	acquire := func(ctx context.Context, req driver.Request) (fence.Token, error) {
		req.Resume = false
		g, err := r.Backend.Acquire(ctx, req)
		return g.Token, err
	}
	if r.f.clampsTTL && req.TTL < driver.MinTTL {
		req.TTL = driver.MinTTL
	}
	if r.f.ignoresCtx {
		ctx = context.WithoutCancel(ctx)
	}
	switch {
	case r.f.unsupported:
		return 0, fmt.Errorf("%w: no resume here", driver.ErrUnsupported)
	case r.f.newToken:
		if err := r.Backend.Release(ctx, claim); err != nil {
			return 0, err
		}
		return acquire(ctx, req)
	case r.f.asAcquire:
		return acquire(ctx, req)
	case r.f.replacesMDByAq:
		if err := r.Backend.Extend(ctx, claim, req.TTL); err != nil {
			return 0, err
		}
		return acquire(ctx, req)
	case r.f.noRenew:
		info, err := r.Backend.Inspect(ctx, name, driver.Exclusive)
		if err != nil || len(info.Holders) == 0 || info.Holders[0].Owner != owner {
			return 0, driver.ErrNotHeld
		}
		return info.Holders[0].Token, nil
	case r.f.anyOwner:
		info, err := r.Backend.Inspect(ctx, name, driver.Exclusive)
		if err != nil || len(info.Holders) == 0 {
			return 0, driver.ErrNotHeld
		}
		h := info.Holders[0]
		return h.Token, r.Backend.Extend(ctx, driver.Claim{Name: name, Owner: h.Owner, Kind: driver.Exclusive}, req.TTL)
	case r.f.cachesToken:
		g, err := r.Backend.Acquire(ctx, req)
		if err != nil {
			return 0, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cache == nil {
			r.cache = map[string]fence.Token{}
		}
		if old, ok := r.cache[name+"\x00"+owner]; ok {
			return old, nil
		}
		r.cache[name+"\x00"+owner] = g.Token
		return g.Token, nil
	}
	g, err := r.Backend.Acquire(ctx, req)
	return g.Token, err
}

func resumeCheck(t *testing.T, name string) drivertest.Check {
	t.Helper()
	for _, c := range allChecks() {
		if c.Name == name && strings.Contains(name, "Resume") {
			return c
		}
	}
	t.Fatalf("no resume check named %q", name)
	return drivertest.Check{}
}

// TestResumeChecksCatchFlaws shows that the resume checks fail on a backend
// that breaks the rule each names: an adopted lease with a new token, a
// released or expired lease re-created, another owner's lease adopted, a
// lease not renewed, an old token returned, the context ignored, the
// metadata replaced; and that they fail, run on their own, on a backend
// without resume instead of passing vacuously (Run reports it as a gap).
func TestResumeChecksCatchFlaws(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flaw  string
		check string
		f     resumeFlaws
	}{
		{"newToken", "ResumeKeepsTokenAndRenews", resumeFlaws{newToken: true}},
		{"newToken/client", "ClientResumeContinuesLease", resumeFlaws{newToken: true}},
		{"newToken/do", "ResumeDoRunsAndReleases", resumeFlaws{newToken: true}},
		{"asAcquire/released", "ResumeReleasedIsNotHeld", resumeFlaws{asAcquire: true}},
		{"asAcquire/expired", "ResumeExpiredIsNotHeld", resumeFlaws{asAcquire: true}},
		{"asAcquire/otherOwner", "ResumeOtherOwnerIsNotHeld", resumeFlaws{asAcquire: true}},
		{"asAcquire/client", "ClientResumeContinuesLease", resumeFlaws{asAcquire: true}},
		{"noRenew", "ResumeKeepsTokenAndRenews", resumeFlaws{noRenew: true}},
		{"anyOwner", "ResumeOtherOwnerIsNotHeld", resumeFlaws{anyOwner: true}},
		{"cachesToken", "ResumeAfterReacquireGetsNewToken", resumeFlaws{cachesToken: true}},
		{"ignoresCtx", "ResumeHonoursContext", resumeFlaws{ignoresCtx: true}},
		{"replacesMetadata", "ResumeKeepsMetadata", resumeFlaws{replacesMDByAq: true}},
		{"unsupported", "ResumeKeepsTokenAndRenews", resumeFlaws{unsupported: true}},
	}
	for _, tc := range cases {
		t.Run(tc.flaw, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), drivertest.Timeout)
			defer cancel()
			err := resumeCheck(t, tc.check).Run(ctx, &flawedResumer{Backend: memory.NewBackend(), f: tc.f}, drivertest.Namespace())
			if err == nil {
				t.Fatalf("%s passed on a backend with the flaw %s", tc.check, tc.flaw)
			}
			t.Logf("caught: %v", err)
		})
	}
}

// TestResumeChecksPassOnMemory runs the resume checks on their own, on a
// fresh correct backend each, through the flawed wrapper with no flaw set
// (so that the wrapper itself is shown correct), and through one that
// clamps a TTL below the minimum: the Client refuses that TTL before the
// backend sees it, so a backend need not.
func TestResumeChecksPassOnMemory(t *testing.T) {
	t.Parallel()
	for _, c := range allChecks() {
		if !strings.Contains(c.Name, "Resume") {
			continue
		}
		for _, b := range []driver.Backend{memory.NewBackend(), &flawedResumer{Backend: memory.NewBackend()}, &flawedResumer{Backend: memory.NewBackend(), f: resumeFlaws{clampsTTL: true}}} {
			if err := runCheck(c, b); err != nil {
				t.Errorf("%s on %T: %v", c.Name, b, err)
			}
		}
	}
}
