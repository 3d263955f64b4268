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
// read permit, whose PriorWriter is A's token, and reads v1: the store's
// fence equals its PriorWriter, so no newer writer has written. R pauses
// past its TTL in turn; writer B takes the write permit (a greater token)
// and writes v2. A wakes and writes late: the document's fence refuses it
// as stale. R wakes and checks the fence against its PriorWriter before it
// acts on what it read: the fence is B's token, above R's PriorWriter, so R
// knows its read is stale. Without fencing, A's late write lands and the
// fence tells R nothing.
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
	read, err := l.store.Get(ctx, doc)
	if err != nil {
		return failed(err)
	}
	freshAtRead := read.Fence <= r.PriorWriter()
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

	// A wakes and writes; R wakes and checks what it read.
	errLate := a.Fenced(l.store).Put(ctx, doc, []byte("late write by A"))
	_ = a.Release(context.WithoutCancel(ctx))
	now, err := l.store.Get(ctx, doc)
	if err != nil {
		return failed(err)
	}
	staleDetected := now.Fence > r.PriorWriter()
	_ = r.Release(context.WithoutCancel(ctx))

	obs := fmt.Sprintf("writer A (token %d) writes v1: %v, pauses | reader R (token %d, prior writer %d) reads %q at fence %d, fresh: %v, pauses | writer B (token %d) writes v2: %v; a reader refused while B writes: %v | A's late write: %v | R's check: fence %d > prior writer %d, stale read detected: %v | stored %q",
		a.Token(), outcome(errV1), r.Token(), r.PriorWriter(), read.Value, read.Fence, freshAtRead,
		b.Token(), outcome(errV2), errors.Is(errReader2, lock.ErrHeld), outcome(errLate),
		now.Fence, r.PriorWriter(), staleDetected, now.Value)
	return expect(obs, errV1 == nil && r.PriorWriter() == a.Token() && freshAtRead &&
		b.Token() > r.Token() && r.Token() > a.Token() && errV2 == nil && errors.Is(errReader2, lock.ErrHeld) &&
		errors.Is(errLate, fence.ErrStale) && staleDetected && string(now.Value) == "v2 by B",
		"A's late write refused as stale by B's fence, and R's stale read detected (fence above its PriorWriter)")
}
