package locktest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// resumeFlaws are realistic bugs of a Resume, one per field, each on top of
// the correct memory.Backend.
type resumeFlaws struct {
	newToken       bool // releases and acquires again: the lease gets a new token
	asAcquire      bool // is Acquire: re-creates a released or expired lease
	noRenew        bool // reads the token (Inspect) but does not renew the lease
	anyOwner       bool // adopts and renews whatever lease is there
	cachesToken    bool // remembers the first token it returned per name and owner
	ignoresCtx     bool // does not look at its context
	clampsTTL      bool // turns a TTL below MinTTL into MinTTL instead of refusing it
	replacesMDByAq bool // renews with a same-owner Acquire: replaces the metadata
}

type flawedResumer struct {
	*memory.Backend
	f resumeFlaws

	mu    sync.Mutex
	cache map[string]fence.Token
}

func (r *flawedResumer) Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if r.f.clampsTTL && ttl < lock.MinTTL {
		ttl = lock.MinTTL
	}
	if r.f.ignoresCtx {
		ctx = context.WithoutCancel(ctx)
	}
	switch {
	case r.f.newToken:
		if err := r.Backend.Release(ctx, name, owner); err != nil {
			return 0, err
		}
		return r.Backend.Acquire(ctx, name, owner, ttl)
	case r.f.asAcquire:
		return r.Backend.Acquire(ctx, name, owner, ttl)
	case r.f.replacesMDByAq:
		if err := r.Backend.Extend(ctx, name, owner, ttl); err != nil {
			return 0, err
		}
		return r.Backend.Acquire(ctx, name, owner, ttl)
	case r.f.noRenew:
		info, err := r.Backend.Inspect(ctx, name)
		if err != nil || !info.Held || info.Owner != owner {
			return 0, lock.ErrNotHeld
		}
		return info.Token, nil
	case r.f.anyOwner:
		info, err := r.Backend.Inspect(ctx, name)
		if err != nil || !info.Held {
			return 0, lock.ErrNotHeld
		}
		return info.Token, r.Backend.Extend(ctx, name, info.Owner, ttl)
	case r.f.cachesToken:
		tok, err := r.Backend.Resume(ctx, name, owner, ttl)
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
		r.cache[name+"\x00"+owner] = tok
		return tok, nil
	}
	return r.Backend.Resume(ctx, name, owner, ttl)
}

func resumeCheck(t *testing.T, name string) locktest.Check {
	t.Helper()
	for _, c := range locktest.ResumeChecks() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no resume check named %q", name)
	return locktest.Check{}
}

// TestResumeChecksCatchFlaws shows that the resume checks fail on a backend
// that breaks the rule each names: an adopted lease with a new token, a
// released or expired lease re-created, another owner's lease adopted, a
// lease not renewed, an old token returned, the context or bad input
// ignored, the metadata replaced.
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
		{"clampsTTL", "ResumeRefusesBadInput", resumeFlaws{clampsTTL: true}},
		{"replacesMetadata", "ResumeKeepsMetadata", resumeFlaws{replacesMDByAq: true}},
		{"noResumer", "ResumeKeepsTokenAndRenews", resumeFlaws{}}, // hidden below: a plain Backend
	}
	for _, tc := range cases {
		t.Run(tc.flaw, func(t *testing.T) {
			t.Parallel()
			var b lock.Backend = &flawedResumer{Backend: memory.NewBackend(), f: tc.f}
			if tc.flaw == "noResumer" {
				b = struct{ lock.Backend }{b} // the capability hidden
			}
			ctx, cancel := context.WithTimeout(context.Background(), locktest.Timeout)
			defer cancel()
			err := resumeCheck(t, tc.check).Run(ctx, b, locktest.Namespace())
			if err == nil {
				t.Fatalf("%s passed on a backend with the flaw %s", tc.check, tc.flaw)
			}
			t.Logf("caught: %v", err)
		})
	}
}

// TestResumeChecksPassOnMemory runs the resume checks on their own, on a
// fresh correct backend each, and through the flawed wrapper with no flaw
// set (so that the wrapper itself is shown correct).
func TestResumeChecksPassOnMemory(t *testing.T) {
	t.Parallel()
	locktest.RunResume(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
	locktest.RunResume(t, func(*testing.T) lock.Backend { return &flawedResumer{Backend: memory.NewBackend()} })
}
