package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// writerLapsed takes the write permit of rw for a short TTL, writes v1
// through it, and waits until the permit has lapsed: a writer paused past
// its TTL.
func writerLapsed(t *testing.T, rw *lock.RWLock, store fence.Store, key string) *lock.Lease {
	t.Helper()
	ctx := context.Background()
	w, err := rw.AcquireWrite(ctx, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Fenced(store).Put(ctx, key, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the writer's permit to lapse", func() bool {
		info, err := rw.Inspect(ctx)
		return err == nil && len(info.Holders) == 0
	})
	return w
}

// A writer paused past its TTL writes while a reader holds a live read
// permit. Its fence is its own token, which is the reader's PriorWriter, so
// comparing the fence with PriorWriter misses the overwrite (the control).
// A reader that first advanced the key to its ReadFence has the late write
// refused as stale, and what it read stays what the key holds.
func TestReadFenceRefusesAPausedWritersLateWrite(t *testing.T) {
	ctx := context.Background()
	for _, advance := range []bool{false, true} {
		store := memory.NewStore()
		rw := lock.New(memory.NewBackend(), nil).RWLock("doc")
		a := writerLapsed(t, rw, store, "doc")

		r, err := rw.AcquireRead(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.PriorWriter() != a.Token() || r.ReadFence() != a.Token()+1 {
			t.Fatalf("reader: prior writer %d, read fence %d; want %d and %d", r.PriorWriter(), r.ReadFence(), a.Token(), a.Token()+1)
		}
		if advance {
			if err := r.Fenced(store).Advance(ctx, "doc"); err != nil {
				t.Fatalf("the reader's Advance: %v", err)
			}
		}
		errLate := a.Fenced(store).Put(ctx, "doc", []byte("late"))
		now, err := store.Get(ctx, "doc")
		if err != nil {
			t.Fatal(err)
		}
		if !advance {
			if errLate != nil || string(now.Value) != "late" || now.Fence > r.PriorWriter() {
				t.Fatalf("control: the late write returned %v, the key holds %q at fence %d (prior writer %d); want it landed unseen by the PriorWriter check",
					errLate, now.Value, now.Fence, r.PriorWriter())
			}
			continue
		}
		if !errors.Is(errLate, fence.ErrStale) {
			t.Fatalf("the paused writer's late write under an advanced reader: %v; want ErrStale", errLate)
		}
		if string(now.Value) != "v1" || now.Fence != r.ReadFence() {
			t.Fatalf("the key holds %q at fence %d; want v1 at the reader's read fence %d", now.Value, now.Fence, r.ReadFence())
		}
		_ = r.Release(ctx)
	}
}

// Readers that follow the same writer share one ReadFence: each advances
// the key without refusing the others, and none of their checks fires. A
// writer granted after them writes above it, and each reader's check sees
// that; a reader that advances only after that writer wrote is told so by
// ErrStale.
func TestReadersShareTheReadFence(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	rw := lock.New(memory.NewBackend(), nil).RWLock("doc")
	w0 := writerLapsed(t, rw, store, "doc")

	r1, err := rw.AcquireRead(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.AcquireRead(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r1.ReadFence() != r2.ReadFence() || r1.ReadFence() != w0.Token()+1 {
		t.Fatalf("read fences %d and %d; want both %d", r1.ReadFence(), r2.ReadFence(), w0.Token()+1)
	}
	for i, r := range []*lock.Lease{r2, r1, r2} {
		if err := r.Fenced(store).Advance(ctx, "doc"); err != nil {
			t.Fatalf("advance %d: %v", i, err)
		}
	}
	rec, err := store.Get(ctx, "doc")
	if err != nil || rec.Fence > r1.ReadFence() || string(rec.Value) != "v1" {
		t.Fatalf("after the readers advanced: %q at fence %d, %v; want v1 at %d", rec.Value, rec.Fence, err, r1.ReadFence())
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// r1 pauses past its TTL without releasing; a writer gets in.
	eventually(t, "the first reader's permit to lapse", func() bool {
		info, err := rw.Inspect(ctx)
		return err == nil && len(info.Holders) == 0
	})
	w1, err := rw.AcquireWrite(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if w1.Token() <= r1.ReadFence() {
		t.Fatalf("writer after the readers has token %d, not above their read fence %d", w1.Token(), r1.ReadFence())
	}
	if err := w1.Fenced(store).Put(ctx, "doc", []byte("v2")); err != nil {
		t.Fatalf("the writer after the readers: %v", err)
	}
	rec, err = store.Get(ctx, "doc")
	if err != nil || rec.Fence <= r1.ReadFence() {
		t.Fatalf("after the newer writer: fence %d, %v; want above the readers' read fence %d", rec.Fence, err, r1.ReadFence())
	}
	if err := r1.Fenced(store).Advance(ctx, "doc"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a lapsed reader's Advance after a newer writer wrote: %v; want ErrStale", err)
	}
}

// A read permit does not write: Put and Delete through its Writer are
// refused with ErrInvalid, and the key is left as it was.
func TestReadPermitDoesNotWrite(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	rw := lock.New(memory.NewBackend(), nil).RWLock("doc")
	writerLapsed(t, rw, store, "doc")
	r, err := rw.AcquireRead(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := store.Get(ctx, "doc")
	if err := r.Fenced(store).Put(ctx, "doc", []byte("by a reader")); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Put through a read permit: %v; want ErrInvalid", err)
	}
	if err := r.Fenced(store).Delete(ctx, "doc"); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Delete through a read permit: %v; want ErrInvalid", err)
	}
	after, err := store.Get(ctx, "doc")
	if err != nil || string(after.Value) != string(before.Value) || after.Fence != before.Fence {
		t.Fatalf("the key went from %q at %d to %q at %d (%v); want it unchanged", before.Value, before.Fence, after.Value, after.Fence, err)
	}
}

// For every lease but a read permit, ReadFence is the lease's token, and
// its Writer's Advance raises the fence to that token.
func TestReadFenceOfOtherLeasesIsTheirToken(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	c := lock.New(memory.NewBackend(), nil)
	l, err := c.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Semaphore("pool", 2).Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.RWLock("doc").AcquireWrite(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*lock.Lease{l, s, w} {
		if l.ReadFence() != l.Token() {
			t.Errorf("%s: read fence %d, token %d; want equal", l.Name(), l.ReadFence(), l.Token())
		}
		if err := l.Fenced(store).Advance(ctx, l.Name()); err != nil {
			t.Fatal(err)
		}
		if rec, _ := store.Get(ctx, l.Name()); rec.Fence != l.Token() {
			t.Errorf("%s: Advance raised the fence to %d; want the token %d", l.Name(), rec.Fence, l.Token())
		}
	}
}
