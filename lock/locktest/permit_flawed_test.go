package locktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// permitFlaws are realistic bugs of a PermitBackend, one per field, each on
// top of the correct memory.Backend.
type permitFlaws struct {
	overLimit      bool // grants one permit more than the limit
	writerShares   bool // takes a write permit as a read permit
	retryMints     bool // a same-owner retry mints a new token instead of extending
	noPlaces       bool // never keeps a place in line: waiters poll, and anyone may overtake them
	extendRecreate bool // an Extend of a permit that is gone takes a new one
	forgetsWriter  bool // reports no prior writer
}

type flawedPermits struct {
	*memory.Backend
	f permitFlaws
}

func (p *flawedPermits) AcquirePermit(ctx context.Context, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	if p.f.overLimit && req.Kind == lock.SemaphorePermit {
		req.Limit++
	}
	if p.f.writerShares && req.Kind == lock.WritePermit {
		req.Kind = lock.ReadPermit
	}
	if p.f.retryMints {
		_ = p.Backend.ReleasePermit(ctx, name, owner)
	}
	if p.f.noPlaces {
		req.Place = 0
	}
	got, err := p.Backend.AcquirePermit(ctx, name, owner, req)
	if p.f.forgetsWriter {
		got.PriorWriter = 0
	}
	return got, err
}

func (p *flawedPermits) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	err := p.Backend.ExtendPermit(ctx, name, owner, ttl)
	if p.f.extendRecreate && errors.Is(err, lock.ErrNotHeld) {
		_, err = p.Backend.AcquirePermit(ctx, name, owner, lock.PermitRequest{Kind: lock.SemaphorePermit, Limit: 2, TTL: ttl})
	}
	return err
}

// TestPermitChecksCatchFlaws shows that each flaw fails the checks named
// for it, and that the correct backend passes every permit check.
func TestPermitChecksCatchFlaws(t *testing.T) {
	checks := map[string]locktest.Check{}
	var all []string
	for _, c := range locktest.PermitChecks() {
		checks[c.Name] = c
		all = append(all, c.Name)
	}
	cases := []struct {
		name   string
		f      permitFlaws
		caught []string // checks that must fail
	}{
		{"correct", permitFlaws{}, nil},
		{"overLimit", permitFlaws{overLimit: true}, []string{"SemaphoreGrantsAtMostLimit", "SemaphoreNeverOverLimitUnderContention"}},
		{"writerShares", permitFlaws{writerShares: true}, []string{"RWReadersShareWritersExclude", "RWReaderLearnsPriorWriter"}},
		{"retryMints", permitFlaws{retryMints: true}, []string{"PermitSameOwnerKeepsToken"}},
		{"noPlaces", permitFlaws{noPlaces: true}, []string{"PermitTryDoesNotJumpTheLine", "RWWriterNotStarvedByReaders", "PermitLeaveLine"}},
		{"extendRecreate", permitFlaws{extendRecreate: true}, []string{"PermitExtendNeverRecreates"}},
		{"forgetsWriter", permitFlaws{forgetsWriter: true}, []string{"RWReaderLearnsPriorWriter", "RWWriterNotStarvedByReaders"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names := tc.caught
			if names == nil {
				names = all
			}
			runOnFlawed(t, checks, names, tc.caught != nil, tc.name, func() lock.Backend {
				return &flawedPermits{Backend: memory.NewBackend(), f: tc.f}
			})
		})
	}
}

// runOnFlawed runs the checks named names on a backend from newBackend each,
// and fails t when one that must catch the flaw (flawed) passes, or when one
// fails a correct backend (!flawed).
func runOnFlawed(t *testing.T, checks map[string]locktest.Check, names []string, flawed bool, flaw string, newBackend func() lock.Backend) {
	t.Helper()
	for _, name := range names {
		c, ok := checks[name]
		if !ok {
			t.Fatalf("no check %q", name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), locktest.Timeout)
		err := c.Run(ctx, newBackend(), locktest.Namespace())
		cancel()
		switch {
		case !flawed && err != nil:
			t.Errorf("%s failed on the correct backend: %v", name, err)
		case flawed && err == nil:
			t.Errorf("%s passed a backend with flaw %s", name, flaw)
		case err != nil:
			t.Logf("%s: %v", name, firstLine(err))
		}
	}
}

// TestPermitChecksFailWithoutCapability: a backend without PermitBackend
// fails every permit check at once instead of passing it vacuously.
func TestPermitChecksFailWithoutCapability(t *testing.T) {
	for _, c := range locktest.PermitChecks() {
		err := c.Run(context.Background(), locktest.BaseOnly(memory.NewBackend()), locktest.Namespace())
		if err == nil {
			t.Errorf("%s passed a backend without lock.PermitBackend", c.Name)
		}
	}
}
