package sqldb_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// A writer paused past its TTL writes while a reader holds a live read
// permit, on every server configuration: the reader advanced the key to its
// ReadFence first, so the late write is refused as stale and the key still
// holds what the reader read. (internal/lab's scenario "read-write lock: a
// paused writer fenced out, a stale read detected" plays the same on the
// other backends.)
func TestRWReaderFencesOutAPausedWriter(t *testing.T) {
	eachPermitServer(t, func(t *testing.T, s server, db *sql.DB, opts *sqldb.Options, b direct) {
		ctx := testCtx(t)
		store := sqldb.NewStore(db, s.d, opts)
		rw := lock.New(b.Backend, nil).RWLock("doc")
		a, err := rw.AcquireWrite(ctx, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Fenced(store).Put(ctx, "doc", []byte("v1")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for { // the writer pauses until its permit lapses
			info, err := rw.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holders) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the writer's permit did not lapse: %+v", info)
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}

		r, err := rw.AcquireRead(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release(ctx)
		if r.PriorWriter() != a.Token() {
			t.Fatalf("reader's prior writer %d; want the writer's token %d", r.PriorWriter(), a.Token())
		}
		if err := r.Fenced(store).Advance(ctx, "doc"); err != nil {
			t.Fatalf("the reader's Advance: %v", err)
		}
		if err := a.Fenced(store).Put(ctx, "doc", []byte("late")); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("the paused writer's late write under a live reader: %v; want ErrStale", err)
		}
		rec, err := store.Get(ctx, "doc")
		if err != nil || string(rec.Value) != "v1" || rec.Fence != r.ReadFence() {
			t.Fatalf("the key holds %q at fence %d (%v); want v1 at the read fence %d", rec.Value, rec.Fence, err, r.ReadFence())
		}
	})
}
