package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// semaphorePaused plays a job runner that lets two workers run at once
// (a semaphore of 2 permits), each worker fencing the job record it works
// on with its permit's token. Worker 1 takes a permit and starts job 1;
// worker 2 takes the other and starts job 2. Worker 1 pauses past its TTL,
// so its permit lapses; worker 3 gets the freed permit, with a token
// greater than both (a semaphore's tokens rise over its whole life, whoever
// holds which permit), and takes over job 1. Worker 1 wakes and writes its
// late result to job 1: the record's fence refuses it as stale, and worker
// 3's result stands. Worker 2's own record, fenced with its own older
// token, is untouched by all this and takes its write. A fourth worker is
// refused while the two permits are held. Without fencing, worker 1's late
// write lands over worker 3's.
func semaphorePaused(ctx context.Context, l *lab) result {
	sem := l.client.Semaphore(l.prefix+"job-runner", 2)
	job1, job2 := l.prefix+"job:1", l.prefix+"job:2"

	w1, err := sem.TryAcquire(ctx, l.ttl)
	if res, skip := unsupported(err); skip {
		return res
	}
	if err != nil {
		return failed(err)
	}
	// Worker 2's permit outlives the whole scenario, on a loaded machine
	// too: the 4th worker's refusal counts on it.
	w2, err := sem.TryAcquire(ctx, 20*l.ttl)
	if err != nil {
		return failed(err)
	}
	defer w2.Release(context.WithoutCancel(ctx))
	errStart1 := w1.Fenced(l.store).Put(ctx, job1, []byte("job 1 started by worker 1"))
	errStart2 := w2.Fenced(l.store).Put(ctx, job2, []byte("job 2 started by worker 2"))

	// Worker 1 pauses (a GC, a swapped-out VM): its permit lapses.
	if err := waitPermitGone(ctx, sem.Inspect, w1.Owner()); err != nil {
		return failed(err)
	}
	w3, err := sem.TryAcquire(ctx, 10*l.ttl)
	if err != nil {
		return failed(fmt.Errorf("worker 3 after worker 1's permit lapsed: %w", err))
	}
	defer w3.Release(context.WithoutCancel(ctx))
	errTakeOver := w3.Fenced(l.store).Put(ctx, job1, []byte("job 1 done by worker 3"))
	_, errFourth := sem.TryAcquire(ctx, 10*l.ttl)

	// Worker 1 wakes, still believing it holds its permit.
	errLate := w1.Fenced(l.store).Put(ctx, job1, []byte("job 1 done by worker 1 (late)"))
	errDone2 := w2.Fenced(l.store).Put(ctx, job2, []byte("job 2 done by worker 2"))
	_ = w1.Release(context.WithoutCancel(ctx))

	rec1, err := l.store.Get(ctx, job1)
	if err != nil {
		return failed(err)
	}
	rec2, err := l.store.Get(ctx, job2)
	if err != nil {
		return failed(err)
	}
	obs := fmt.Sprintf("workers 1, 2 (tokens %d, %d) start jobs 1, 2: %v, %v | worker 1 pauses, its permit lapses; worker 3 (token %d) takes over job 1: %v; a 4th worker refused: %v | worker 1's late write: %v; worker 2 finishes job 2: %v | job 1 %q, job 2 %q",
		w1.Token(), w2.Token(), outcome(errStart1), outcome(errStart2), w3.Token(), outcome(errTakeOver),
		errors.Is(errFourth, lock.ErrHeld), outcome(errLate), outcome(errDone2), rec1.Value, rec2.Value)
	return expect(obs, errStart1 == nil && errStart2 == nil && errTakeOver == nil && errDone2 == nil &&
		w3.Token() > w2.Token() && w2.Token() > w1.Token() && errors.Is(errFourth, lock.ErrHeld) &&
		errors.Is(errLate, fence.ErrStale) && string(rec1.Value) == "job 1 done by worker 3" &&
		string(rec2.Value) == "job 2 done by worker 2",
		"worker 3's take-over accepted, worker 1's late write refused as stale, worker 2's job untouched")
}

// unsupported turns the error of a lab backend that answers
// lock.ErrUnsupported (it cannot serve permits) into a skipped result; skip
// is false for any other error.
func unsupported(err error) (res result, skip bool) {
	if !errors.Is(err, lock.ErrUnsupported) {
		return result{}, false
	}
	return result{skipped: "lock.ErrUnsupported: " + err.Error()}, true
}

// waitPermitGone polls inspect until owner holds no live permit: the pause
// of a stalled permit holder.
func waitPermitGone(ctx context.Context, inspect func(context.Context) (lock.Info, error), owner string) error {
	return poll(ctx, "a permit to lapse", func() (bool, error) {
		ps, err := inspect(ctx)
		if err != nil {
			return false, err
		}
		for _, h := range ps.Holders {
			if h.Owner == owner {
				return false, nil
			}
		}
		return true, nil
	})
}
