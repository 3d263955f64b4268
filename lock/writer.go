package lock

import (
	"context"
	"errors"

	"github.com/fencekit/fencekit/fence"
)

// Writer writes to a fence.Store through a lease: every write carries the
// lease's token, so its methods take no token and Writer is not itself a
// fence.Store. A write refused as stale is reported to the Client's Observer
// as EventStale. Get it from Lease.Fenced.
type Writer struct {
	lease *Lease
	store fence.Store
}

// Put writes value under key with the lease's token.
func (w *Writer) Put(ctx context.Context, key string, value []byte) error {
	if w.store == nil {
		return errNilStore
	}
	return w.report(key, w.store.Put(ctx, key, w.lease.token, value))
}

// Delete deletes key with the lease's token, keeping the fence.
func (w *Writer) Delete(ctx context.Context, key string) error {
	if w.store == nil {
		return errNilStore
	}
	return w.report(key, w.store.Delete(ctx, key, w.lease.token))
}

// Advance raises key's fence to the lease's token, so that every older
// holder is refused from now on. Call it before reading a value you are
// going to rewrite.
func (w *Writer) Advance(ctx context.Context, key string) error {
	if w.store == nil {
		return errNilStore
	}
	return w.report(key, w.store.Advance(ctx, key, w.lease.token))
}

// Get reads key.
func (w *Writer) Get(ctx context.Context, key string) (fence.Record, error) {
	if w.store == nil {
		return fence.Record{}, errNilStore
	}
	return w.store.Get(ctx, key)
}

var errNilStore = fence.Invalid("nil store")

func (w *Writer) report(key string, err error) error {
	if errors.Is(err, fence.ErrStale) {
		w.lease.emit(Event{Kind: EventStale, Name: w.lease.name, Token: w.lease.token, Key: key, Err: err})
	}
	return err
}
