package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// resumeRunFor runs cfg in resume mode with short settings (4 workers
// unless cfg says, 2 keys, 1 s, TTL 30 ms, pauses in 3 cycles of 10, a
// memory store) and returns the report and its text.
func resumeRunFor(t *testing.T, cfg Config) (*ResumeReport, string) {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memory.NewStore()
	}
	cfg.Name = "memory"
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	cfg.Keys, cfg.Duration, cfg.TTL, cfg.PauseChance = 2, time.Second, 30*time.Millisecond, 0.3
	rep, err := RunResume(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	return rep, out.String()
}

// Resumes on the in-process backend: no violation, and the run did what it
// is for (leases resumed, resumes refused after a pause, stale writes
// refused).
func TestRunResumeOnMemory(t *testing.T) {
	t.Parallel()
	rep, out := resumeRunFor(t, Config{Backend: memory.NewBackend(), Seed: 3})
	if !rep.OK() || !strings.HasSuffix(out, "no violation\n") {
		t.Fatalf("violations on a fenced resume run:\n%s", out)
	}
	if rep.Resumed < 10 || rep.NotHeld == 0 || rep.StaleRefused == 0 || rep.Pauses == 0 {
		t.Fatalf("the run exercised too little:\n%s", out)
	}
	if rep.Restarts != rep.Resumed+rep.NotHeld+rep.ResumeFailures {
		t.Fatalf("%d restarts are not %d + %d + %d", rep.Restarts, rep.Resumed, rep.NotHeld, rep.ResumeFailures)
	}
	// A cycle resumes only after its first increment: most add two.
	if rep.Final != int64(rep.Increments) || rep.Increments <= rep.Resumed {
		t.Fatalf("final %d, increments %d for %d acquisitions:\n%s", rep.Final, rep.Increments, rep.Acquisitions, out)
	}
	if !strings.Contains(out, "each lease resumed by a new Client") || !strings.Contains(out, "resumed after a newer grant (must be 0)    0") {
		t.Fatalf("report:\n%s", out)
	}
}

// unsupportedResume is a backend that cannot resume: it answers a resume
// with driver.ErrUnsupported.
type unsupportedResume struct{ *memory.Backend }

func (b unsupportedResume) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Resume {
		return driver.Grant{}, driver.ErrUnsupported
	}
	return b.Backend.Acquire(ctx, req)
}

// A backend that answers a resume with driver.ErrUnsupported cannot serve
// the run: RunResume says so with that error, at once, instead of a report.
func TestRunResumeReportsErrUnsupported(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := RunResume(context.Background(), Config{Backend: unsupportedResume{memory.NewBackend()}, Store: memory.NewStore(),
		Duration: time.Minute, TTL: 30 * time.Millisecond, PauseChance: -1})
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("a backend that cannot resume: %v, want ErrUnsupported", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the run went on for %v after the backend answered ErrUnsupported", d)
	}
}

func TestRunResumeUnfencedLosesIncrements(t *testing.T) {
	t.Parallel()
	testkit.SomeSeedShows(t, 3, "an unfenced resume run must lose increments", func(seed uint64) (bool, string) {
		rep, out := resumeRunFor(t, Config{Backend: memory.NewBackend(), Workers: 5, Seed: seed, Unfenced: true})
		return !rep.OK() && rep.Lost > 0 && strings.Contains(out, "VIOLATIONS"), out
	})
}

// mintingResume is a backend with a broken resume: it releases the owner's
// lease and acquires the name again for the owner, minting a new token.
type mintingResume struct{ *memory.Backend }

func (b mintingResume) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !req.Resume {
		return b.Backend.Acquire(ctx, req)
	}
	_ = b.Release(ctx, driver.Claim{Name: req.Name, Owner: req.Owner, Kind: driver.Exclusive})
	req.Resume = false
	g, err := b.Backend.Acquire(ctx, req)
	if errors.Is(err, lock.ErrHeld) {
		return driver.Grant{}, fmt.Errorf("%w: %q", lock.ErrNotHeld, req.Name)
	}
	return g, err
}

// anyOwnerResume is a backend with a broken resume: it adopts whatever
// lease is live on the name, whoever's owner it is.
type anyOwnerResume struct{ *memory.Backend }

func (b anyOwnerResume) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !req.Resume {
		return b.Backend.Acquire(ctx, req)
	}
	info, err := b.Inspect(ctx, req.Name, driver.Exclusive)
	if err != nil {
		return driver.Grant{}, err
	}
	if len(info.Holders) == 0 {
		return driver.Grant{}, fmt.Errorf("%w: %q", lock.ErrNotHeld, req.Name)
	}
	h := info.Holders[0]
	if err := b.Extend(ctx, driver.Claim{Name: req.Name, Owner: h.Owner, Kind: driver.Exclusive}, req.TTL); err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: h.Token}, nil
}

// refusingResume is a backend with a broken resume: it refuses every
// lease, live or not.
type refusingResume struct{ *memory.Backend }

func (b refusingResume) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Resume {
		return driver.Grant{}, fmt.Errorf("%w: %q", lock.ErrNotHeld, req.Name)
	}
	return b.Backend.Acquire(ctx, req)
}

// The checker fails a Resume that mints a token (the counters stay right:
// only the resume checks can see it), one that adopts another owner's
// lease, and one that refuses live leases.
func TestRunResumeCatchesBrokenResumes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		backend driver.Backend
		caught  func(*ResumeReport) bool
	}{
		{"mints", mintingResume{memory.NewBackend()}, func(r *ResumeReport) bool { return r.TokenChanged > 0 && r.NotLatest > 0 }},
		{"adopts any owner's lease", anyOwnerResume{memory.NewBackend()}, func(r *ResumeReport) bool { return r.TokenChanged > 0 && r.Superseded > 0 }},
		{"refuses every lease", refusingResume{memory.NewBackend()}, func(r *ResumeReport) bool { return r.Resumed == 0 && r.RefusedLive > 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rep, out := resumeRunFor(t, Config{Backend: c.backend, Seed: 4})
			if rep.OK() || !c.caught(rep) || !strings.Contains(out, "RESUME VIOLATIONS") {
				t.Fatalf("a Resume that %s: the checker must report it:\n%s", c.name, out)
			}
		})
	}
}

// The resume checks on a made-up history (TTL 100): each fires on its own.
func TestResumeTally(t *testing.T) {
	grants := []Op{
		{Kind: Acquire, Key: 0, Owner: "a", Token: 5, Call: 0, Return: 10},
		{Kind: Acquire, Key: 0, Owner: "b", Token: 6, Call: 100, Return: 110},
		{Kind: Acquire, Key: 1, Owner: "c", Token: 7, Call: 100, Return: 110},
	}
	notHeld := fmt.Errorf("%w: x", lock.ErrNotHeld)
	for _, c := range []struct {
		name                                 string
		obs                                  resumeObs
		changed, notLatest, superseded, live int
	}{
		{"resumed in time", resumeObs{Key: 0, Owner: "a", Adopted: 5, Token: 5, Call: 50, Return: 60}, 0, 0, 0, 0},
		{"refused after b's grant", resumeObs{Key: 0, Owner: "a", Adopted: 5, Err: notHeld, Call: 200, Return: 210}, 0, 0, 0, 0},
		{"refused near the end of the TTL", resumeObs{Key: 0, Owner: "a", Adopted: 5, Err: notHeld, Call: 50, Return: 96}, 0, 0, 0, 0},
		{"refused while live", resumeObs{Key: 0, Owner: "a", Adopted: 5, Err: notHeld, Call: 50, Return: 94}, 0, 0, 0, 1},
		{"failed while live", resumeObs{Key: 0, Owner: "a", Adopted: 5, Err: errors.New("cut"), Call: 50, Return: 60}, 0, 0, 0, 0},
		{"resumed after b's grant", resumeObs{Key: 0, Owner: "a", Adopted: 5, Token: 5, Call: 200, Return: 210}, 0, 0, 1, 0},
		{"overlapping b's grant", resumeObs{Key: 0, Owner: "a", Adopted: 5, Token: 5, Call: 105, Return: 210}, 0, 0, 0, 0},
		{"another lock's grant", resumeObs{Key: 1, Owner: "d", Adopted: 4, Token: 4, Call: 200, Return: 210}, 0, 1, 1, 0},
		{"a minted token", resumeObs{Key: 0, Owner: "a", Adopted: 5, Token: 8, Call: 50, Return: 60}, 1, 1, 0, 0},
		{"b's token", resumeObs{Key: 0, Owner: "a", Adopted: 5, Token: 6, Call: 200, Return: 210}, 1, 1, 1, 0},
	} {
		rep := &ResumeReport{Report: &Report{}}
		rep.tally([]resumeObs{c.obs}, grants, 100)
		if rep.TokenChanged != c.changed || rep.NotLatest != c.notLatest || rep.Superseded != c.superseded || rep.RefusedLive != c.live {
			t.Errorf("%s: changed %d, not latest %d, superseded %d, refused live %d; want %d, %d, %d, %d", c.name,
				rep.TokenChanged, rep.NotLatest, rep.Superseded, rep.RefusedLive, c.changed, c.notLatest, c.superseded, c.live)
		}
		if ok := len(rep.resumeViolations()) == 0; ok != (c.changed+c.notLatest+c.superseded+c.live == 0) {
			t.Errorf("%s: resume violations %q", c.name, rep.resumeViolations())
		}
	}
}

func TestRunResumeRefusesSets(t *testing.T) {
	_, err := RunResume(context.Background(), Config{Backend: memory.NewBackend(), Store: memory.NewStore(), Sets: true})
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Sets in a resume run: %v, want ErrInvalid", err)
	}
}
