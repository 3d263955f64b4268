package nats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestResumeFromAnotherBackend: a process that restarted has a Backend of
// its own, with none of the earlier one's cached leases; it resumes the
// lease by owner and gets the same token. The earlier Backend's cache, now
// stale (the entry moved on), does not make its own Resume fail or return
// another token: the write expects the cached revision, conflicts, and reads
// again.
func TestResumeFromAnotherBackend(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	prefix := testkit.Namespace(t)
	open := func() direct {
		b, err := fencenats.NewBackend(ctx, js, bucket, &fencenats.BackendOptions{Prefix: prefix})
		if err != nil {
			t.Fatalf("NewBackend: %v", err)
		}
		return direct{b}
	}
	before, after := open(), open()
	owner, err := lock.NewOwner()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := before.Acquire(ctx, "job", owner, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	for i, b := range []direct{after, before, after} {
		got, err := b.Resume(ctx, "job", owner, 10*time.Second)
		if err != nil || got != tok {
			t.Fatalf("Resume %d: token %d, %v; want %d", i, got, err, tok)
		}
	}
	other, _ := lock.NewOwner()
	if _, err := before.Resume(ctx, "job", other, 10*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Resume by another owner: %v; want ErrNotHeld", err)
	}
	if err := after.Release(ctx, "job", owner); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := before.Resume(ctx, "job", owner, 10*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Resume after the release, from a Backend whose cache still has the lease: %v; want ErrNotHeld", err)
	}
	if info, err := after.Inspect(ctx, "job"); err != nil || info.Held {
		t.Fatalf("after the refused Resume: %+v, %v; want free", info, err)
	}
}
