package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// resumeAfterRestart plays a worker that restarts mid-job. A takes the lock
// and writes part 1, saving its owner value. A's process restarts (the old
// process lingers on as a zombie that still believes it holds the lock);
// the new instance resumes the lease by name and saved owner, gets the same
// token and writes part 2, which the store accepts as the same holder's.
// Then the new instance stalls past its TTL and B takes the lock (a newer
// token) and writes. Both stale instances of A write late and are refused
// as stale, and a third instance that tries to resume after the expiry is
// refused with ErrNotHeld: the expired lease is not re-created and B keeps
// the lock.
func resumeAfterRestart(ctx context.Context, l *lab) result {
	name, key := l.prefix+"resumable", l.prefix+"resumed"
	old, err := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if err != nil {
		return failed(err)
	}
	errPart1 := old.Fenced(l.store).Put(ctx, key, []byte("part 1 by A"))
	saved := old.Owner() // what A persisted before it restarted

	// The restarted instance: a new Client, as in a new process.
	restarted, err := lock.New(l.backend, nil).Resume(ctx, name, saved, l.ttl)
	if err != nil {
		return failed(err)
	}
	errPart2 := restarted.Fenced(l.store).Put(ctx, key, []byte("part 2 by A, restarted"))

	// The restarted instance stalls past its TTL; B takes over.
	if err := waitFree(ctx, l.backend, name); err != nil {
		return failed(err)
	}
	b, err := l.client.TryAcquire(ctx, name, 10*l.ttl)
	if err != nil {
		return failed(err)
	}
	defer b.Release(context.WithoutCancel(ctx))
	errB := b.Fenced(l.store).Put(ctx, key, []byte("written by B"))

	// Both stale instances of A wake up and write.
	errLate := restarted.Fenced(l.store).Put(ctx, key, []byte("late write by restarted A"))
	errZombie := old.Fenced(l.store).Put(ctx, key, []byte("late write by A's old process"))
	// A third instance of A tries to resume after the expiry.
	_, errResume := lock.New(l.backend, nil).Resume(ctx, name, saved, l.ttl)
	h, held, err := l.holder(ctx, name)
	if err != nil {
		return failed(err)
	}
	stillB := held && h.Owner == b.Owner() && h.Token == b.Token()
	rec, err := l.store.Get(ctx, key)
	if err != nil {
		return failed(err)
	}
	obs := fmt.Sprintf("A (token %d) part 1: %v | restarted A resumed token %d, part 2: %v | B (token %d): %v | late writes: restarted A %v, old A %v | resume after expiry: %v, B still holds: %v | stored %q",
		old.Token(), outcome(errPart1), restarted.Token(), outcome(errPart2), b.Token(), outcome(errB),
		outcome(errLate), outcome(errZombie), outcome(errResume), stillB, rec.Value)
	return expect(obs, errPart1 == nil && restarted.Token() == old.Token() && errPart2 == nil && errB == nil &&
		errors.Is(errLate, fence.ErrStale) && errors.Is(errZombie, fence.ErrStale) &&
		errors.Is(errResume, lock.ErrNotHeld) && stillB && string(rec.Value) == "written by B",
		"the resumed lease to keep A's token and write, both late writes refused as stale, the late resume refused with ErrNotHeld, B's value stored")
}
