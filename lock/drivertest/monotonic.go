package drivertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/internal/models"
	"github.com/fencekit/fencekit/lock/driver"
)

// MonotonicTimeout bounds the check TokensMonotonicUnderContention: the
// workload and the linearizability check of its history.
const MonotonicTimeout = 60 * time.Second

// monotonicName is the name of the token-monotonicity check.
const monotonicName = "TokensMonotonicUnderContention"

// monotonicCheck is the token-monotonicity check, which drives the backend
// from many goroutines for a second or two: goroutines contend for a few
// locks, acquiring (and retrying with the same owner while held, as
// lock.Client does), re-acquiring, extending, releasing and letting leases
// expire, and the history of what each call returned, with its call and
// return times, is checked for linearizability against the token model
// (internal/models.Tokens): per lock name, every token an acquire returns is
// above every token returned by an acquire that completed before it was
// called, distinct owners never get equal tokens, a holder's re-acquire
// returns its own token, and an owner's Extend and Release succeed only
// while no newer acquire has returned. Tokens may skip values and may be
// shared with other names.
func monotonicCheck() Check {
	return Check{Name: monotonicName, Run: checkMonotonic}
}

// monotonicWorkload sizes the check's workload.
const (
	monoWorkers = 6
	monoNames   = 2
	monoCycles  = 40 // per worker
	monoTTL     = 30 * time.Millisecond
	// monoCoarseExpiries caps the leases a worker leaves to expire on a
	// backend with a declared TTL granularity, whose leases last at least a
	// granule each: a few expiries show the same thing as many, in seconds
	// instead of minutes.
	monoCoarseExpiries = 1
)

func checkMonotonic(ctx context.Context, b driver.Backend, ns string) error {
	rec := &recorder{start: time.Now()}
	var wg sync.WaitGroup
	errs := make(chan error, monoWorkers)
	for i := 0; i < monoWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(i), uint64(rec.start.UnixNano())))
			expiries := 0
			for c := 0; c < monoCycles; c++ {
				mayExpire := granularity(ctx) == 0 || expiries < monoCoarseExpiries
				expired, err := monoCycle(ctx, b, rec, i, ns, rng, mayExpire)
				if err != nil {
					errs <- err
					return
				}
				if expired {
					expiries++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	model := models.Tokens(models.TokenState{})
	for _, part := range model.Partition(rec.ops) {
		limit := time.Until(deadlineOf(ctx, MonotonicTimeout))
		res, info := porcupine.CheckOperationsVerbose(model, part, limit)
		switch res {
		case porcupine.Illegal:
			return fmt.Errorf("the tokens of %q are not monotonic: no order of its %d calls that fits when each was made and returned explains what they returned; the first call that cannot be placed is marked >\n%s",
				part[0].Input.(models.TokenInput).Name, len(part), describeIllegal(model, part, info))
		case porcupine.Unknown:
			return fmt.Errorf("the token history of %d calls could not be checked within %v", len(part), limit)
		}
	}
	return nil
}

func deadlineOf(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}

// monoCycle takes one lock for a fresh owner, uses it a little, and lets it
// go: released, or (when mayExpire) left to expire, which it reports.
func monoCycle(ctx context.Context, b driver.Backend, rec *recorder, client int, ns string, rng *mrand.Rand, mayExpire bool) (bool, error) {
	name := fmt.Sprintf("%smono-%d", ns, rng.IntN(monoNames))
	o := owner()
	// On a backend with a declared TTL granularity a contender may wait out
	// the expiry of every lease the others left, each at least a granule
	// long (and as long as the server's minimum lease): only the check's own
	// timeout bounds it.
	deadline, wait := time.Now().Add(waitFor), waitFor
	if granularity(ctx) > 0 {
		deadline = deadlineOf(ctx, MonotonicTimeout)
		wait = time.Until(deadline)
	}
	for {
		var err error
		w := timed(func() { _, err = rec.acquire(ctx, b, client, name, o) })
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrHeld) || w.ret.After(deadline) {
			return false, fmt.Errorf("Acquire(%q) while contending: %v; want a token or driver.ErrHeld within %v", name, err, wait)
		}
		if err := sleep(ctx, time.Duration(rng.Int64N(int64(2*time.Millisecond)))); err != nil {
			return false, err
		}
	}
	if rng.IntN(4) == 0 {
		_, _ = rec.acquire(ctx, b, client, name, o) // the holder again: same token
	}
	if rng.IntN(4) == 0 {
		rec.change(client, name, o, models.LockExtend, func() error { return extend(ctx, b, name, o, monoTTL) })
	}
	if rng.IntN(3) == 0 && mayExpire {
		return true, nil // let it expire
	}
	rec.change(client, name, o, models.LockRelease, func() error { return release(ctx, b, name, o) })
	return false, nil
}

// openEnded is the return time of a call whose outcome is unknown.
const openEnded = 1 << 62

// recorder keeps the history of a Monotonic run.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (r *recorder) acquire(ctx context.Context, b driver.Backend, client int, name, o string) (int64, error) {
	return r.call(client, name, o, models.LockAcquire, driver.ErrHeld, func() (int64, error) {
		t, err := take(ctx, b, name, o, monoTTL)
		return int64(t), err
	})
}

func (r *recorder) change(client int, name, o string, kind models.LockOp, op func() error) {
	_, _ = r.call(client, name, o, kind, driver.ErrNotHeld, func() (int64, error) { return 0, op() })
}

// call runs op and records it, unless it was refused with refusal: a refused
// call changes nothing, so leaving it out of the history changes no verdict
// and keeps the check fast. A call that failed otherwise may still take
// effect later (a request the backend's client gave up on may reach the
// server), so its window stays open to the end of the history.
func (r *recorder) call(client int, name, o string, kind models.LockOp, refusal error, op func() (int64, error)) (int64, error) {
	call := time.Since(r.start)
	tok, err := op()
	ret := time.Since(r.start)
	out := models.TokenOutput{Outcome: models.LockOK, Token: tok}
	switch {
	case errors.Is(err, refusal):
		return tok, err
	case err != nil:
		out = models.TokenOutput{Outcome: models.LockUnknown}
		ret = openEnded
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{
		ClientId: client,
		Input:    models.TokenInput{Name: name, Op: kind, Owner: o},
		Output:   out,
		Call:     int64(call),
		Return:   int64(ret),
	})
	return tok, err
}

// describeIllegal lists the calls around the first one, in call order, that
// the longest linearization porcupine found for part could not place.
func describeIllegal(model porcupine.Model, part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []int
	for _, lins := range info.PartialLinearizations() {
		for _, lin := range lins {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := map[int]bool{}
	for _, id := range longest {
		placed[id] = true
	}
	order := make([]int, len(part))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(part[a].Call, part[b].Call) })
	at := slices.IndexFunc(order, func(i int) bool { return !placed[i] })
	var s strings.Builder
	for j := max(at-10, 0); j < min(at+5, len(order)); j++ {
		o := part[order[j]]
		mark := "  "
		if j == at {
			mark = "> "
		}
		ret := time.Duration(o.Return).String()
		if o.Return == openEnded {
			ret = "open"
		}
		fmt.Fprintf(&s, "  %s%s  [%v, %s]\n", mark, model.DescribeOperation(o.Input, o.Output), time.Duration(o.Call), ret)
	}
	return s.String()
}
