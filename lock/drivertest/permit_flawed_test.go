package drivertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// permitFlaws are realistic bugs of permits, one per field, each on top of
// the correct memory backend.
type permitFlaws struct {
	overLimit      bool // grants one permit more than the limit
	writerShares   bool // takes a write permit as a read permit
	retryMints     bool // a same-owner retry mints a new token instead of extending
	noPlaces       bool // never keeps a place in line: waiters poll, and anyone may overtake them
	extendRecreate bool // an Extend of a permit that is gone takes a new one
	forgetsWriter  bool // reports no prior writer
	noWake         bool // Await ignores wake-ups: waiters are served at their renewals
	pollsSlowly    bool // Await ignores wake-ups and returns after slowPoll at most
}

// flawedPermits breaks the requests of permits (Kind Semaphore, Read and
// Write) and passes those of locks to the memory backend it embeds.
type flawedPermits struct {
	driver.Backend
	f permitFlaws
}

func (p *flawedPermits) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !req.Kind.Permit() {
		return p.Backend.Acquire(ctx, req)
	}
	if p.f.overLimit && req.Kind == driver.Semaphore {
		req.Limit++
	}
	if p.f.writerShares && req.Kind == driver.Write {
		req.Kind = driver.Read
	}
	if p.f.retryMints {
		_ = p.Backend.Release(ctx, driver.Claim{Name: req.Name, Owner: req.Owner, Kind: req.Kind})
	}
	if p.f.noPlaces {
		req.Place = 0
	}
	got, err := p.Backend.Acquire(ctx, req)
	if p.f.forgetsWriter {
		got.PriorWriter = 0
	}
	return got, err
}

func (p *flawedPermits) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	err := p.Backend.Extend(ctx, c, ttl)
	if p.f.extendRecreate && c.Kind.Permit() && errors.Is(err, driver.ErrNotHeld) {
		_, err = p.Backend.Acquire(ctx, driver.Request{Name: c.Name, Owner: c.Owner, Kind: driver.Semaphore, Limit: 2, TTL: ttl})
	}
	return err
}

func (p *flawedPermits) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	switch {
	case !c.Kind.Permit():
	case p.f.noWake:
		return sleepAwait(ctx, max)
	case p.f.pollsSlowly:
		return sleepAwait(ctx, min(max, slowPoll))
	}
	return p.Backend.Await(ctx, c, max)
}

// refusesPermits is a third-party backend without permits: it answers
// driver.ErrUnsupported to every request of a permit, changing nothing.
type refusesPermits struct{ driver.Backend }

func unsupported(k driver.Kind) error {
	return fmt.Errorf("%w: no %v permits here", driver.ErrUnsupported, k)
}

func (r refusesPermits) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind.Permit() {
		return driver.Grant{}, unsupported(req.Kind)
	}
	return r.Backend.Acquire(ctx, req)
}

func (r refusesPermits) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if c.Kind.Permit() {
		return unsupported(c.Kind)
	}
	return r.Backend.Extend(ctx, c, ttl)
}

func (r refusesPermits) Release(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return unsupported(c.Kind)
	}
	return r.Backend.Release(ctx, c)
}

func (r refusesPermits) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind.Permit() {
		return unsupported(c.Kind)
	}
	return r.Backend.Await(ctx, c, max)
}

func (r refusesPermits) Leave(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return unsupported(c.Kind)
	}
	return r.Backend.Leave(ctx, c)
}

func (r refusesPermits) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if kind.Permit() {
		return driver.Info{}, unsupported(kind)
	}
	return r.Backend.Inspect(ctx, name, kind)
}

// TestPermitChecksCatchFlaws shows that each flaw fails the checks named
// for it, and that the correct backend passes every permit check.
func TestPermitChecksCatchFlaws(t *testing.T) {
	checks := map[string]drivertest.Check{}
	var all []string
	for _, c := range checksNamed("Permits/") {
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
		{"noWake", permitFlaws{noWake: true}, []string{"PermitWakesBeforeRenewal", "SemaphoreServesInArrivalOrder"}},
		{"pollsSlowly", permitFlaws{pollsSlowly: true}, []string{"PermitWakesBeforeRenewal"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names := all
			if tc.caught != nil {
				names = nil
				for _, n := range tc.caught {
					names = append(names, "Permits/"+n)
				}
			}
			runOnFlawed(t, checks, names, tc.caught != nil, tc.name, func() driver.Backend {
				return &flawedPermits{Backend: memory.NewBackend(), f: tc.f}
			})
		})
	}
}

// runOnFlawed runs the checks named names on a backend from newBackend each,
// and fails t when one that must catch the flaw (flawed) passes, or when one
// fails a correct backend (!flawed).
func runOnFlawed(t *testing.T, checks map[string]drivertest.Check, names []string, flawed bool, flaw string, newBackend func() driver.Backend) {
	t.Helper()
	for _, name := range names {
		c, ok := checks[name]
		if !ok {
			t.Fatalf("no check %q", name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), drivertest.Timeout)
		err := c.Run(ctx, newBackend(), drivertest.Namespace())
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

// TestPermitChecksFailWithoutPermits: a backend that answers
// driver.ErrUnsupported to permits fails every permit check run on its
// own instead of passing it vacuously (Run reports them as gaps,
// gaps_test.go).
func TestPermitChecksFailWithoutPermits(t *testing.T) {
	for _, c := range checksNamed("Permits/") {
		err := c.Run(context.Background(), refusesPermits{memory.NewBackend()}, drivertest.Namespace())
		if err == nil {
			t.Errorf("%s passed a backend without permits", c.Name)
		}
	}
}
