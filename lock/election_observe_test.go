package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// flakyInspect fails every Inspect while down is set, as a backend that
// cannot be reached does.
type flakyInspect struct {
	driver.Backend
	down atomic.Bool
}

var errInspectDown = driver.Transient(errors.New("dial tcp: connection refused"))

func (f *flakyInspect) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if f.down.Load() {
		return driver.Info{}, errInspectDown
	}
	return f.Backend.Inspect(ctx, name, kind)
}

// TestObserveReportsFailedPolls: a receiver can tell a stale view from a
// fresh one. While polls fail, the latest value carries the poll's error and
// the time of the last successful read; when they succeed again, a value
// with Err nil follows, although the term did not change.
func TestObserveReportsFailedPolls(t *testing.T) {
	fb := &flakyInspect{Backend: memory.NewBackend()}
	client := lock.New(fb, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := client.Election("leader", time.Second)
	values := e.Observe(ctx, 5*time.Millisecond)

	v := await(t, values, "the first value")
	if v.Term != 0 || v.Err != nil || v.ReadAt.IsZero() {
		t.Fatalf("first value %+v; want no leader, read from the backend", v)
	}
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(context.Background())
	for v.Term != l.Term() {
		v = await(t, values, "the leader's term")
	}
	if v.Err != nil || v.ReadAt.IsZero() {
		t.Fatalf("leader %+v; want a fresh read", v)
	}

	fb.down.Store(true)
	stale := await(t, values, "a value once polls fail")
	if !errors.Is(stale.Err, errInspectDown) || stale.Term != l.Term() || stale.ReadAt.IsZero() || time.Since(stale.ReadAt) < 0 {
		t.Fatalf("value while the backend is down: %+v; want the last view with the poll's error", stale)
	}
	fb.down.Store(false)
	fresh := await(t, values, "a value once polls succeed again")
	if fresh.Err != nil || fresh.Term != l.Term() || !fresh.ReadAt.After(stale.ReadAt) {
		t.Fatalf("value after the backend came back: %+v; want the same term, Err nil, a newer read than %v", fresh, stale.ReadAt)
	}
}

// TestObserveRefusesABadTTL: a TTL of 0 or less made Observe poll every
// millisecond forever; now the refusal is sent once and the channel closed.
func TestObserveRefusesABadTTL(t *testing.T) {
	for _, ttl := range []time.Duration{0, -time.Second} {
		f := &countingInspect{Backend: memory.NewBackend()}
		ctx, cancel := context.WithCancel(context.Background())
		values := lock.New(f, nil).Election("leader", ttl).Observe(ctx, 0)
		v := await(t, values, "the refusal")
		if !errors.Is(v.Err, lock.ErrInvalid) {
			t.Errorf("ttl %v: first value %+v; want Err matching ErrInvalid", ttl, v)
		}
		select {
		case v, ok := <-values:
			if ok {
				t.Errorf("ttl %v: a second value %+v; want the channel closed", ttl, v)
			}
		case <-time.After(waitLimit):
			t.Errorf("ttl %v: the channel stayed open", ttl)
		}
		cancel()
		if n := f.inspects.Load(); n != 0 {
			t.Errorf("ttl %v: %d poll(s) sent; want 0", ttl, n)
		}
	}
}

// countingInspect counts Inspect calls.
type countingInspect struct {
	driver.Backend
	inspects atomic.Int64
}

func (c *countingInspect) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	c.inspects.Add(1)
	return c.Backend.Inspect(ctx, name, kind)
}
