package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// ElectionCheck is one promise of lock.Election over a driver.Backend, checked
// with fenced writes to a Store.
type ElectionCheck struct {
	// Name is the subtest's name.
	Name string
	// Run returns nil when the election over backend keeps the promise.
	// Every lock name and store key it uses starts with ns.
	Run func(ctx context.Context, backend driver.Backend, store fence.Store, ns string) error
}

// RunElection runs every election check as a subtest of t. newBackend and
// newStore are called once per check. The backend must store holder
// metadata (Run checks that it does), which Election.Leader reports. It takes about
// three seconds.
func RunElection(t *testing.T, newBackend func(t *testing.T) driver.Backend, newStore func(t *testing.T) fence.Store) {
	t.Helper()
	for _, c := range ElectionChecks() {
		t.Run(c.Name, func(t *testing.T) {
			b, s := newBackend(t), newStore(t)
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			if err := c.Run(ctx, b, s, Namespace()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ElectionChecks returns every election check, in the order RunElection
// runs them.
func ElectionChecks() []ElectionCheck {
	return []ElectionCheck{
		{"OneLeaderAtATime", checkOneLeaderAtATime},
		{"PausedLeaderFenced", checkPausedLeaderFenced},
		{"LeadCampaignsAgain", checkLeadCampaignsAgain},
		{"ObserveLeader", checkObserveLeader},
		{"CampaignBoundedByContext", checkCampaignBoundedByContext},
	}
}

// term is one leadership as its leader saw it: valid from start to end on
// this process's clock.
type term struct {
	token      fence.Token
	start, end time.Time
	candidate  int
}

// checkOneLeaderAtATime runs three candidates that lead in turns, and checks
// that their terms rise, that no two leaders' windows of validity overlap
// (a window starts when Campaign returns and ends when the leader decides to
// resign, or at its local deadline if it was lost), that the backend reports
// each leader's own term while it leads, and that the store's fence ends at
// the last term.
func checkOneLeaderAtATime(ctx context.Context, b driver.Backend, s fence.Store, ns string) error {
	name, key := ns+"election", ns+"record"
	const candidates, rounds = 3, 4
	var (
		mu    sync.Mutex
		terms []term
		errs  []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := 0; c < candidates; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := lock.New(b, &lock.Options{Metadata: fmt.Sprintf("candidate-%d", c), MaxBackoff: 20 * time.Millisecond})
			for r := 0; r < rounds; r++ {
				err := client.Lead(ctx, name, 2*time.Second, func(ctx context.Context, l *lock.Leadership) error {
					start := time.Now()
					info, err := inspect(ctx, b, name)
					if err != nil {
						return err
					}
					if !info.Held || info.Token != l.Term() || info.Owner != l.Lease().Owner() {
						return fmt.Errorf("candidate %d leads term %d, but the backend reports %+v", c, l.Term(), info)
					}
					w := l.Fenced(s)
					if err := w.Advance(ctx, key); err != nil {
						return fmt.Errorf("term %d: Advance: %w", l.Term(), err)
					}
					if err := w.Put(ctx, key, []byte(fmt.Sprint(l.Term()))); err != nil {
						return fmt.Errorf("term %d: Put: %w", l.Term(), err)
					}
					time.Sleep(5 * time.Millisecond) // hold the leadership for a moment
					end := time.Now()
					if l.Err() != nil {
						end = l.Lease().Deadline()
					}
					mu.Lock()
					terms = append(terms, term{token: l.Term(), start: start, end: end, candidate: c})
					mu.Unlock()
					return nil
				})
				if err != nil {
					fail(fmt.Errorf("candidate %d: Lead: %w", c, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(terms) != candidates*rounds {
		return fmt.Errorf("%d terms recorded; want %d", len(terms), candidates*rounds)
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].token < terms[j].token })
	for i := 1; i < len(terms); i++ {
		prev, cur := terms[i-1], terms[i]
		if cur.token == prev.token {
			return fmt.Errorf("two leaderships with term %d (candidates %d and %d)", cur.token, prev.candidate, cur.candidate)
		}
		if cur.start.Before(prev.end) {
			return fmt.Errorf("term %d (candidate %d) began %v before term %d (candidate %d) ended: two leaders at once",
				cur.token, cur.candidate, prev.end.Sub(cur.start), prev.token, prev.candidate)
		}
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("Get(%q): %w", key, err)
	}
	if last := terms[len(terms)-1].token; rec.Fence != last || string(rec.Value) != fmt.Sprint(last) {
		return fmt.Errorf("store holds %q with fence %d; want the last term %d", rec.Value, rec.Fence, last)
	}
	return nil
}

// pausable is a Backend whose renewals for one owner hang until their
// context ends, as if that holder's process were frozen.
type pausable struct {
	driver.Backend
	mu     sync.Mutex
	paused string
}

func (p *pausable) pause(owner string) {
	p.mu.Lock()
	p.paused = owner
	p.mu.Unlock()
}

func (p *pausable) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	p.mu.Lock()
	frozen := c.Owner == p.paused
	p.mu.Unlock()
	if frozen {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Backend.Extend(ctx, c, ttl)
}

// checkPausedLeaderFenced freezes a leader's renewals until its lease runs
// out, lets a second candidate take over and write, and checks that the old
// leader's fenced writes are then refused as stale, that the new term is
// greater, and that the old term's local deadline came before the new term
// began.
func checkPausedLeaderFenced(ctx context.Context, b driver.Backend, s fence.Store, ns string) error {
	name, key := ns+"election", ns+"record"
	pb := &pausable{Backend: b}
	const ttl = 300 * time.Millisecond
	old, err := lock.New(pb, nil).Election(name, ttl).Campaign(ctx)
	if err != nil {
		return fmt.Errorf("first Campaign: %w", err)
	}
	defer old.Resign(context.WithoutCancel(ctx))
	oldWriter := old.Fenced(s)
	if err := oldWriter.Put(ctx, key, []byte("old")); err != nil {
		return fmt.Errorf("old leader's Put before the pause: %w", err)
	}
	pb.pause(old.Lease().Owner())

	cctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	next, err := lock.New(pb, &lock.Options{MaxBackoff: 20 * time.Millisecond}).Election(name, ttl).Campaign(cctx)
	if err != nil {
		return fmt.Errorf("second Campaign while the leader is paused: %w", err)
	}
	defer next.Resign(context.WithoutCancel(ctx))
	if next.Term() <= old.Term() {
		return fmt.Errorf("new term %d is not above the paused leader's %d", next.Term(), old.Term())
	}
	if d := old.Lease().Deadline(); next.Since().Before(d) {
		return fmt.Errorf("new term began %v before the paused leader's local deadline", d.Sub(next.Since()))
	}
	w := next.Fenced(s)
	if err := w.Advance(ctx, key); err != nil {
		return fmt.Errorf("new leader's Advance: %w", err)
	}
	if err := w.Put(ctx, key, []byte("new")); err != nil {
		return fmt.Errorf("new leader's Put: %w", err)
	}
	// The old leader wakes up and writes with its term.
	if err := oldWriter.Put(ctx, key, []byte("old again")); !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("old leader's Put after the takeover = %v; want fence.ErrStale", err)
	}
	if err := oldWriter.Delete(ctx, key); !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("old leader's Delete after the takeover = %v; want fence.ErrStale", err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil || string(rec.Value) != "new" || rec.Fence != next.Term() {
		return fmt.Errorf("Get(%q) = %q fence %d, %v; want %q with fence %d", key, rec.Value, rec.Fence, err, "new", next.Term())
	}
	select {
	case <-old.Done():
	case <-time.After(waitFor):
		return errors.New("the paused leader's leadership did not end")
	}
	if !errors.Is(old.Err(), lock.ErrLost) {
		return fmt.Errorf("paused leader's Err = %v; want ErrLost", old.Err())
	}
	return nil
}

// checkLeadCampaignsAgain loses the first leadership that Lead gets (its
// renewals freeze) and checks that Lead campaigns again and runs fn under a
// greater term, then returns fn's result.
func checkLeadCampaignsAgain(ctx context.Context, b driver.Backend, _ fence.Store, ns string) error {
	name := ns + "election"
	pb := &pausable{Backend: b}
	client := lock.New(pb, &lock.Options{MaxBackoff: 20 * time.Millisecond})
	var seen []fence.Token
	done := errors.New("second term done")
	err := client.Lead(ctx, name, 200*time.Millisecond, func(ctx context.Context, l *lock.Leadership) error {
		seen = append(seen, l.Term())
		if len(seen) == 1 {
			pb.pause(l.Lease().Owner())
			<-ctx.Done() // lost at the local deadline
			return context.Cause(ctx)
		}
		return done
	})
	if !errors.Is(err, done) {
		return fmt.Errorf("Lead = %v; want the second run's error", err)
	}
	if len(seen) != 2 || seen[1] <= seen[0] {
		return fmt.Errorf("Lead ran fn under terms %v; want two, rising", seen)
	}
	if err := elWaitFree(ctx, b, name); err != nil {
		return fmt.Errorf("after Lead returned: %w", err)
	}
	return nil
}

// checkObserveLeader checks that Observe and Leader report no leader, then
// the leader's term and metadata, then no leader again after it resigns.
func checkObserveLeader(ctx context.Context, b driver.Backend, _ fence.Store, ns string) error {
	name := ns + "election"
	watcher := lock.New(b, nil).Election(name, time.Second)
	if _, err := watcher.Leader(ctx); !errors.Is(err, lock.ErrNoLeader) {
		return fmt.Errorf("Leader with no candidate = %v; want ErrNoLeader", err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := watcher.Observe(octx, 5*time.Millisecond)
	// next returns the next view that tells something new. A view with
	// Err set (a poll that failed on a real server) and the repeat of the
	// last term that Observe sends when polls recover are skipped: neither
	// is a change of leader.
	var last lock.Leader
	seenAny := false
	next := func(want string) (lock.Leader, error) {
		timeout := time.After(waitFor)
		for {
			select {
			case l, ok := <-seen:
				if !ok {
					return l, fmt.Errorf("Observe closed; want %s", want)
				}
				if l.Err != nil || (seenAny && l.Term == last.Term) {
					continue
				}
				last, seenAny = l, true
				return l, nil
			case <-timeout:
				return lock.Leader{}, fmt.Errorf("Observe sent nothing new within %v; want %s", waitFor, want)
			}
		}
	}
	if l, err := next("no leader"); err != nil || l.Term != 0 {
		return fmt.Errorf("first observation = %+v, %v; want Term 0", l, err)
	}
	before := time.Now()
	lead, err := lock.New(b, &lock.Options{Metadata: "node-a"}).Election(name, time.Second).Campaign(ctx)
	if err != nil {
		return fmt.Errorf("Campaign: %w", err)
	}
	l, err := next("the leader")
	if err != nil {
		return err
	}
	if l.Term != lead.Term() || l.Metadata != "node-a" || l.Name != name || l.TTL <= 0 || l.TTL > time.Second || l.Since.Before(before) {
		return fmt.Errorf("observed %+v; want term %d, metadata node-a, a TTL in (0, 1s], Since after %v", l, lead.Term(), before)
	}
	got, err := watcher.Leader(ctx)
	if err != nil || got.Term != lead.Term() || !got.Since.Equal(l.Since) {
		return fmt.Errorf("Leader = %+v, %v; want term %d since %v (the first sighting)", got, err, lead.Term(), l.Since)
	}
	if err := lead.Resign(ctx); err != nil {
		return fmt.Errorf("Resign: %w", err)
	}
	if !errors.Is(lead.Err(), lock.ErrReleased) {
		return fmt.Errorf("Err after Resign = %v; want ErrReleased", lead.Err())
	}
	if l, err := next("no leader after Resign"); err != nil || l.Term != 0 {
		return fmt.Errorf("observation after Resign = %+v, %v; want Term 0", l, err)
	}
	stop()
	for range seen { // Observe closes its channel when its context ends
	}
	return nil
}

// checkCampaignBoundedByContext checks that a Campaign against a live
// leader gives up when its context ends, with ErrNotAcquired and the
// context's error.
func checkCampaignBoundedByContext(ctx context.Context, b driver.Backend, _ fence.Store, ns string) error {
	name := ns + "election"
	lead, err := lock.New(b, nil).Election(name, 5*time.Second).Campaign(ctx)
	if err != nil {
		return fmt.Errorf("Campaign: %w", err)
	}
	defer lead.Resign(context.WithoutCancel(ctx))
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = lock.New(b, nil).Election(name, 5*time.Second).Campaign(cctx)
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("Campaign against a live leader = %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	if lead.Err() != nil {
		return fmt.Errorf("the leader's leadership ended: %w", lead.Err())
	}
	return nil
}

// elWaitFree polls until name is free, failing after waitFor.
func elWaitFree(ctx context.Context, b driver.Backend, name string) error {
	deadline := time.Now().Add(waitFor)
	for {
		info, err := inspect(ctx, b, name)
		if err != nil {
			return err
		}
		if !info.Held {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%q still held by token %d after %v", name, info.Token, waitFor)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
