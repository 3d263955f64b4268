package lock

import (
	"context"
	"errors"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Writer writes to a fence.Store through a lease: every write carries the
// lease's token, so its methods take no token and Writer is not itself a
// fence.Store. A write refused as stale is reported to the Client's Observer
// as a Stale event. Get it from Lease.Fenced.
//
// Through a read permit of a read-write lock, Writer only advances and
// reads: Advance raises the key's fence to the permit's ReadFence, and Put
// and Delete are refused with an error matching ErrInvalid, sending
// nothing, since a reader that wrote would break the lock's promise to its
// other readers.
type Writer struct {
	lease *Lease
	store fence.Store
}

// Put writes value under key with the lease's token.
func (w *Writer) Put(ctx context.Context, key string, value []byte) error {
	if err := w.writable(key); err != nil {
		return err
	}
	return w.report(key, w.store.Put(ctx, key, w.lease.token, value))
}

// Delete deletes key with the lease's token, keeping the fence.
func (w *Writer) Delete(ctx context.Context, key string) error {
	if err := w.writable(key); err != nil {
		return err
	}
	return w.report(key, w.store.Delete(ctx, key, w.lease.token))
}

// Advance raises key's fence to the lease's token, so that every older
// holder is refused from now on. Call it before reading a value you are
// going to rewrite. Through a read permit it raises the fence to the
// permit's ReadFence instead, so that no writer granted before the reader
// can change the key under it; an error matching fence.ErrStale then means
// a newer writer has already written.
func (w *Writer) Advance(ctx context.Context, key string) error {
	if w.store == nil {
		return errNilStore
	}
	return w.report(key, w.store.Advance(ctx, key, w.lease.ReadFence()))
}

// Get reads key.
func (w *Writer) Get(ctx context.Context, key string) (fence.Record, error) {
	if w.store == nil {
		return fence.Record{}, errNilStore
	}
	return w.store.Get(ctx, key)
}

var errNilStore = driver.Invalid("nil store")

// writable refuses a nil store, and any write through a read permit.
func (w *Writer) writable(key string) error {
	if w.store == nil {
		return errNilStore
	}
	if w.lease.client.kind == driver.Read {
		return driver.Invalid("a read permit does not write: %q not written (its Writer only advances the fence and reads)", key)
	}
	return nil
}

func (w *Writer) report(key string, err error) error {
	if errors.Is(err, fence.ErrStale) {
		w.lease.emit(Event{kind: eventStale, Name: w.lease.name, Token: w.lease.token, Key: key, Err: err})
	}
	return err
}
