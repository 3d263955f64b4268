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

// evict ends the leader's lease on the backend, as `fencectl release
// --force` or a pause past the TTL does, and lets another candidate lead
// one term and write under it. The evicted leader's keep-alive has not
// noticed (its TTL is long): only its next fenced write can tell.
func evict(t *testing.T, mem *memory.Backend, store fence.Store, name, key string) fence.Token {
	t.Helper()
	mem.Expire(name)
	other, err := lock.New(mem, nil).TryAcquire(context.Background(), name, time.Minute)
	if err != nil {
		t.Fatalf("another candidate after the eviction: %v", err)
	}
	if err := other.Fenced(store).Put(context.Background(), key, []byte("other")); err != nil {
		t.Fatalf("the other leader's write: %v", err)
	}
	if err := other.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return other.Token()
}

// TestLeadCampaignsAgainAfterAStaleRefusal: a leader evicted on the backend
// whose fn returns the fence.ErrStale of its next write has lost the
// leadership: Lead campaigns again and runs fn under a greater term,
// instead of returning.
func TestLeadCampaignsAgainAfterAStaleRefusal(t *testing.T) {
	mem, store := memory.NewBackend(), memory.NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var terms []fence.Token
	var otherTerm fence.Token
	err := lock.New(mem, nil).Lead(ctx, "leader", time.Minute, func(ctx context.Context, l *lock.Leadership) error {
		terms = append(terms, l.Term())
		if len(terms) == 1 {
			otherTerm = evict(t, mem, store, "leader", "schedule")
			err := l.Fenced(store).Put(ctx, "schedule", []byte("first"))
			if !errors.Is(err, fence.ErrStale) {
				t.Errorf("the evicted leader's write = %v; want fence.ErrStale", err)
			}
			return err
		}
		return l.Fenced(store).Put(ctx, "schedule", []byte("second"))
	})
	if err != nil {
		t.Fatalf("Lead = %v; want the second run's nil", err)
	}
	if len(terms) != 2 || terms[1] <= otherTerm || otherTerm <= terms[0] {
		t.Fatalf("fn ran under terms %v (the other leader's: %d); want two, the second above the other's", terms, otherTerm)
	}
	if rec, err := store.Get(ctx, "schedule"); err != nil || string(rec.Value) != "second" || rec.Fence != terms[1] {
		t.Fatalf("store holds %+v, %v; want the second run's write under term %d", rec, err, terms[1])
	}
	if info, _ := inspectLock(ctx, mem, "leader"); info.Held {
		t.Fatalf("still held after Lead returned: %+v", info)
	}
}

// TestLeadCampaignsAgainWhenTheReleaseFindsTheLeaseGone: a leader evicted on
// the backend whose fn returns without a fenced write (its result nil or
// not) finds the lease gone when Lead releases it: that is a lost
// leadership too, and Lead campaigns again, under a greater term.
func TestLeadCampaignsAgainWhenTheReleaseFindsTheLeaseGone(t *testing.T) {
	for name, firstResult := range map[string]error{"nil": nil, "an error": errors.New("gave up")} {
		t.Run(name, func(t *testing.T) {
			mem := memory.NewBackend()
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			done := errors.New("second term done")
			var terms []fence.Token
			err := lock.New(mem, nil).Lead(ctx, "leader", time.Minute, func(ctx context.Context, l *lock.Leadership) error {
				terms = append(terms, l.Term())
				if len(terms) == 1 {
					mem.Expire("leader") // evicted; the keep-alive has not noticed
					return firstResult
				}
				return done
			})
			if !errors.Is(err, done) {
				t.Fatalf("Lead = %v; want the second run's error", err)
			}
			if len(terms) != 2 || terms[1] <= terms[0] {
				t.Fatalf("fn ran under terms %v; want two, rising", terms)
			}
		})
	}
}
