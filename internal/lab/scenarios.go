package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// lab is what every scenario runs against.
type lab struct {
	backend driver.Backend
	store   fence.Store
	client  *lock.Client
	ttl     time.Duration
	prefix  string // keeps this run's lock names and keys apart from others'
}

// result is what one scenario observed, and how it differs from what was
// expected ("" when it does not).
type result struct {
	observed string
	mismatch string
	err      error
	// skipped, when set, says why the scenario did not run: the lab
	// backend answered that it cannot serve the shape the scenario needs
	// (lock.ErrUnsupported).
	skipped string
}

type scenario struct {
	title string
	run   func(ctx context.Context, l *lab) result
}

var scenarios = []scenario{
	{"mutual exclusion", mutualExclusion},
	{"release by the wrong owner", wrongOwnerRelease},
	{"naive release by key (the classic bug)", naiveRelease},
	{"checked release after expiry", checkedRelease},
	{"lease expires mid-work, no fencing", overlapUnfenced},
	{"lease expires mid-work, fenced store", overlapFenced},
	{"read-modify-write by a paused holder", readModifyWrite},
	{"restarted worker resumes its lease, stale instances fenced", resumeAfterRestart},
	{"money transfer under a set of locks, paused past its TTL, fenced per account", transferPaused},
	{"semaphore permit paused past its TTL, its job taken over and fenced", semaphorePaused},
	{"read-write lock: a paused writer fenced out, a stale read detected", rwPaused},
}

// ScenarioCount is how many scenarios a run has, for the tests that check
// that a run reports all of them.
func ScenarioCount() int { return len(scenarios) }

func expect(observed string, ok bool, want string) result {
	if ok {
		return result{observed: observed}
	}
	return result{observed: observed, mismatch: "expected " + want}
}

func failed(err error) result { return result{err: err} }

func mutualExclusion(ctx context.Context, l *lab) result {
	name := l.prefix + "report"
	a, errA := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if errA != nil {
		return failed(errA)
	}
	defer a.Release(context.WithoutCancel(ctx))
	_, errB := l.client.TryAcquire(ctx, name, 10*l.ttl)
	obs := fmt.Sprintf("A acquires: %v (token %d) | B acquires while A holds it: %v", errA == nil, a.Token(), errB == nil)
	return expect(obs, errors.Is(errB, lock.ErrHeld), "B refused with ErrHeld")
}

func wrongOwnerRelease(ctx context.Context, l *lab) result {
	name := l.prefix + "report2"
	a, err := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if err != nil {
		return failed(err)
	}
	b, err := lock.NewOwner()
	if err != nil {
		return failed(err)
	}
	errB := l.backend.Release(ctx, driver.Claim{Name: name, Owner: b, Kind: driver.Exclusive})
	h, held, err := l.holder(ctx, name)
	if err != nil {
		return failed(err)
	}
	stillA := held && h.Owner == a.Owner()
	errA := a.Release(ctx)
	obs := fmt.Sprintf("B releasing with its own owner: %v | A still holds it: %v | A releasing: %v", outcome(errB), stillA, outcome(errA))
	return expect(obs, errors.Is(errB, lock.ErrNotHeld) && stillA && errA == nil, "B refused, A still holding, A's release ok")
}

// naiveRelease shows what an unlock by key alone does: it looks up whoever
// holds the lock and deletes that lease, which after an expiry is somebody
// else's. fencekit never does this; the scenario does it by hand.
func naiveRelease(ctx context.Context, l *lab) result {
	name := l.prefix + "job"
	a, err := l.client.TryAcquire(ctx, name, l.ttl)
	if err != nil {
		return failed(err)
	}
	if err := waitFree(ctx, l.backend, name); err != nil { // A stalls past its TTL
		return failed(err)
	}
	b, errB := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if errB != nil {
		return failed(errB)
	}
	defer b.Release(context.WithoutCancel(ctx))
	// A finishes late and "unlocks" by key: delete whatever lease is there.
	h, _, err := l.holder(ctx, name)
	if err != nil {
		return failed(err)
	}
	if err := l.backend.Release(ctx, driver.Claim{Name: name, Owner: h.Owner, Kind: driver.Exclusive}); err != nil {
		return failed(err)
	}
	c, errC := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if errC == nil {
		defer c.Release(context.WithoutCancel(ctx))
	}
	obs := fmt.Sprintf("A's lease expired, B took it: %v | A's delete-by-key freed it and C got it too: %v", errB == nil, errC == nil)
	_ = a
	return expect(obs, errC == nil, "the naive release to let C in while B believes it holds the lock")
}

func checkedRelease(ctx context.Context, l *lab) result {
	name := l.prefix + "job2"
	a, err := l.client.TryAcquire(ctx, name, l.ttl)
	if err != nil {
		return failed(err)
	}
	if err := waitFree(ctx, l.backend, name); err != nil {
		return failed(err)
	}
	b, err := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if err != nil {
		return failed(err)
	}
	defer b.Release(context.WithoutCancel(ctx))
	errA := a.Release(ctx)
	h, held, err := l.holder(ctx, name)
	if err != nil {
		return failed(err)
	}
	stillB := held && h.Owner == b.Owner()
	obs := fmt.Sprintf("A's late release: %v | B still holds the lock: %v", outcome(errA), stillB)
	return expect(obs, errors.Is(errA, lock.ErrNotHeld) && stillB, "A's release refused with ErrNotHeld and B untouched")
}

// twoWorkers plays the article's pause: A acquires and stalls past its TTL;
// B acquires after the expiry and writes; then A wakes and writes. Channels
// order the steps, so the outcome does not depend on timing. It returns how
// many times both were inside at once and each worker's write error.
func twoWorkers(ctx context.Context, l *lab, name string, write func(who string, lease *lock.Lease) error) (overlap int, errA, errB error, err error) {
	var (
		mu     sync.Mutex
		inside int
	)
	enter := func() {
		mu.Lock()
		inside++
		if inside > 1 {
			overlap++
		}
		mu.Unlock()
	}
	leave := func() { mu.Lock(); inside--; mu.Unlock() }

	a, err := l.client.TryAcquire(ctx, name, l.ttl)
	if err != nil {
		return 0, nil, nil, err
	}
	enter()
	// A is paused: its lease runs out on the backend while it sleeps.
	if err := waitFree(ctx, l.backend, name); err != nil {
		return 0, nil, nil, err
	}
	bDone := make(chan struct{})
	var bErr error
	go func() {
		defer close(bDone)
		b, err := l.client.Acquire(ctx, name, 10*l.ttl)
		if err != nil {
			bErr = err
			return
		}
		defer b.Release(context.WithoutCancel(ctx))
		enter()
		errB = write("B", b)
		leave()
	}()
	<-bDone
	if bErr != nil {
		return 0, nil, nil, bErr
	}
	// A wakes up, still believing it holds the lock, and writes.
	errA = write("A", a)
	leave()
	_ = a.Release(context.WithoutCancel(ctx))
	return overlap, errA, errB, nil
}

func overlapUnfenced(ctx context.Context, l *lab) result {
	var (
		mu     sync.Mutex
		writes []string
	)
	overlap, errA, errB, err := twoWorkers(ctx, l, l.prefix+"work", func(who string, _ *lock.Lease) error {
		mu.Lock()
		writes = append(writes, who) // an unfenced resource takes every write
		mu.Unlock()
		return nil
	})
	if err != nil {
		return failed(err)
	}
	obs := fmt.Sprintf("workers inside at once: %d time(s) | writes that landed: %d %v", overlap, len(writes), writes)
	return expect(obs, overlap == 1 && errA == nil && errB == nil && len(writes) == 2, "one overlap and both writes landing")
}

func overlapFenced(ctx context.Context, l *lab) result {
	key := l.prefix + "stored"
	tokens := map[string]fence.Token{}
	overlap, errA, errB, err := twoWorkers(ctx, l, l.prefix+"work2", func(who string, lease *lock.Lease) error {
		tokens[who] = lease.Token()
		return lease.Fenced(l.store).Put(ctx, key, []byte("written by "+who))
	})
	if err != nil {
		return failed(err)
	}
	rec, err := l.store.Get(ctx, key)
	if err != nil {
		return failed(err)
	}
	obs := fmt.Sprintf("overlaps: %d | B (token %d) wrote: %v | A (token %d) wrote late: %v | stored %q",
		overlap, tokens["B"], outcome(errB), tokens["A"], outcome(errA), rec.Value)
	return expect(obs, overlap == 1 && errB == nil && errors.Is(errA, fence.ErrStale) && string(rec.Value) == "written by B",
		"B accepted, A refused as stale, B's value stored")
}

// readModifyWrite runs an increment twice: A reads, stalls, and writes after
// B has read; first without Advance, then with it.
func readModifyWrite(ctx context.Context, l *lab) result {
	without, acceptedWithout, err := increments(ctx, l, l.prefix+"counter", false)
	if err != nil {
		return failed(err)
	}
	with, acceptedWith, err := increments(ctx, l, l.prefix+"counter2", true)
	if err != nil {
		return failed(err)
	}
	obs := fmt.Sprintf("without Advance: %d increments accepted, counter 10 -> %d (one lost) | with Advance: %d accepted, A refused, counter 10 -> %d",
		acceptedWithout, without, acceptedWith, with)
	return expect(obs, acceptedWithout == 2 && without == 11 && acceptedWith == 1 && with == 11,
		"the lost update without Advance, and A's stale write refused with it")
}

// increments returns the final counter and how many increments the store
// accepted.
func increments(ctx context.Context, l *lab, key string, advance bool) (int, int, error) {
	if err := l.store.Put(ctx, key, 1, []byte("10")); err != nil {
		return 0, 0, err
	}
	name := key + ":lock"
	read := func(lease *lock.Lease) (int, error) {
		w := lease.Fenced(l.store)
		if advance {
			if err := w.Advance(ctx, key); err != nil {
				return 0, err
			}
		}
		rec, err := w.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(rec.Value))
	}
	accepted := 0
	write := func(lease *lock.Lease, n int) error {
		err := lease.Fenced(l.store).Put(ctx, key, []byte(strconv.Itoa(n+1)))
		if err == nil {
			accepted++
		} else if !errors.Is(err, fence.ErrStale) {
			return err
		}
		return nil
	}
	a, err := l.client.TryAcquire(ctx, name, l.ttl)
	if err != nil {
		return 0, 0, err
	}
	nA, err := read(a)
	if err != nil {
		return 0, 0, err
	}
	if err := waitFree(ctx, l.backend, name); err != nil { // A stalls
		return 0, 0, err
	}
	b, err := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if err != nil {
		return 0, 0, err
	}
	defer b.Release(context.WithoutCancel(ctx))
	nB, err := read(b)
	if err != nil {
		return 0, 0, err
	}
	if err := write(a, nA); err != nil { // A wakes and writes first
		return 0, 0, err
	}
	if err := write(b, nB); err != nil {
		return 0, 0, err
	}
	rec, err := l.store.Get(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	n, err := strconv.Atoi(string(rec.Value))
	return n, accepted, err
}

// holder asks the backend for the live holder of the lock called name;
// held is false when the lock is free.
func (l *lab) holder(ctx context.Context, name string) (h driver.Holder, held bool, err error) {
	info, err := l.backend.Inspect(ctx, name, driver.Exclusive)
	if err != nil || len(info.Holders) == 0 {
		return driver.Holder{}, false, err
	}
	return info.Holders[0], true, nil
}

// waitFree polls until the lock name is free: the pause of a stalled holder.
func waitFree(ctx context.Context, b driver.Backend, name string) error {
	return poll(ctx, fmt.Sprintf("%q to expire", name), func() (bool, error) {
		info, err := b.Inspect(ctx, name, driver.Exclusive)
		return err == nil && len(info.Holders) == 0, err
	})
}

// poll calls done every few milliseconds until it reports true or fails, or
// ctx ends; what names the wait in the error.
func poll(ctx context.Context, what string, done func() (bool, error)) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fence.ErrStale):
		return "refused (stale)"
	case errors.Is(err, lock.ErrNotHeld):
		return "refused (not held)"
	}
	return "error: " + err.Error()
}
