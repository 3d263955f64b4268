package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// rwPaused plays a document guarded by a read-write lock. Writer A takes
// the write permit, writes v1 and pauses past its TTL. Reader R then gets a
// read permit, whose PriorWriter is A's token, raises the document's fence
// to its ReadFence (one above A's token) and reads v1. A wakes while R's
// permit is live and writes late: the fence R raised refuses it as stale,
// so what R read stays what the document holds, and R's check (fence at
// most its ReadFence) is right to pass. R pauses past its TTL in turn;
// writer B takes the write permit (a greater token) and writes v2. R wakes
// and checks the fence before it acts on what it read: the fence is B's
// token, above its ReadFence, so R knows its read is stale. Without
// fencing, A's late write lands under R's live permit, and no fence tells
// R anything.
func rwPaused(ctx context.Context, l *lab) result {
	rw := l.client.RWLock(l.prefix + "doc:lock")
	doc := l.prefix + "doc"

	a, err := rw.TryAcquireWrite(ctx, l.ttl)
	if res, skip := unsupported(err); skip {
		return res
	}
	if err != nil {
		return failed(err)
	}
	errV1 := a.Fenced(l.store).Put(ctx, doc, []byte("v1 by A"))
	if err := waitPermitGone(ctx, rw.Inspect, a.Owner()); err != nil { // A pauses
		return failed(err)
	}

	r, err := rw.TryAcquireRead(ctx, l.ttl)
	if err != nil {
		return failed(fmt.Errorf("reader after writer A's permit lapsed: %w", err))
	}
	reader := r.Fenced(l.store)
	errSeal := reader.Advance(ctx, doc)
	read, err := reader.Get(ctx, doc)
	if err != nil {
		return failed(err)
	}

	// A wakes while R's permit is live, and writes.
	errLate := a.Fenced(l.store).Put(ctx, doc, []byte("late write by A"))
	_ = a.Release(context.WithoutCancel(ctx))
	mid, err := reader.Get(ctx, doc)
	if err != nil {
		return failed(err)
	}
	checkPasses := mid.Fence <= r.ReadFence() // R's check, made now, finds no newer writer
	unchanged := string(mid.Value) == string(read.Value)
	if err := waitPermitGone(ctx, rw.Inspect, r.Owner()); err != nil { // R pauses
		return failed(err)
	}

	b, err := rw.TryAcquireWrite(ctx, 10*l.ttl)
	if err != nil {
		return failed(fmt.Errorf("writer B after the reader's permit lapsed: %w", err))
	}
	defer b.Release(context.WithoutCancel(ctx))
	errV2 := b.Fenced(l.store).Put(ctx, doc, []byte("v2 by B"))
	_, errReader2 := rw.TryAcquireRead(ctx, 10*l.ttl)

	// R wakes and checks what it read.
	now, err := reader.Get(ctx, doc)
	if err != nil {
		return failed(err)
	}
	staleDetected := now.Fence > r.ReadFence()
	_ = r.Release(context.WithoutCancel(ctx))

	obs := fmt.Sprintf("writer A (token %d) writes v1: %v, pauses | reader R (token %d, prior writer %d, read fence %d) advances: %v, reads %q | A's late write under R's live permit: %v; R's check passes: %v, and the document is %q at fence %d, unchanged: %v | R pauses; writer B (token %d) writes v2: %v; a reader refused while B writes: %v | R's check: fence %d > read fence %d, stale read detected: %v | stored %q",
		a.Token(), outcome(errV1), r.Token(), r.PriorWriter(), r.ReadFence(), outcome(errSeal), read.Value,
		outcome(errLate), checkPasses, mid.Value, mid.Fence, unchanged,
		b.Token(), outcome(errV2), errors.Is(errReader2, lock.ErrHeld),
		now.Fence, r.ReadFence(), staleDetected, now.Value)
	return expect(obs, errV1 == nil && r.PriorWriter() == a.Token() && r.ReadFence() == a.Token()+1 &&
		errSeal == nil && string(read.Value) == "v1 by A" && errors.Is(errLate, fence.ErrStale) && checkPasses && unchanged &&
		b.Token() > r.Token() && r.Token() > a.Token() && errV2 == nil && errors.Is(errReader2, lock.ErrHeld) &&
		staleDetected && string(now.Value) == "v2 by B",
		"A's late write refused as stale by the fence R raised, and R's stale read detected once B wrote (fence above its ReadFence)")
}
