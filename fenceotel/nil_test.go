package fenceotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestNilWrappedLikeUnwrapped: wrapping a nil backend or store refuses
// every call with ErrInvalid, as the same calls do without fenceotel
// (lock.New(nil), Lease.Fenced(nil)), and starts no span.
func TestNilWrappedLikeUnwrapped(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()

	_, plain := lock.New(nil, nil).Acquire(ctx, "a", time.Minute)
	_, traced := lock.New(r.tel.Backend(nil), nil).Acquire(ctx, "a", time.Minute)
	if !errors.Is(plain, lock.ErrInvalid) || !errors.Is(traced, lock.ErrInvalid) {
		t.Fatalf("Acquire on a nil backend: %v without fenceotel, %v with it; want ErrInvalid both", plain, traced)
	}
	b := r.tel.Backend(nil)
	if _, err := b.Acquire(ctx, driver.Request{Name: "a", Owner: "o", TTL: time.Minute, Kind: driver.Exclusive}); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Backend(nil).Acquire: %v", err)
	}
	if err := b.Extend(ctx, driver.Claim{Name: "a", Owner: "o", Kind: driver.Exclusive}, time.Minute); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Backend(nil).Extend: %v", err)
	}
	if err := b.Release(ctx, driver.Claim{Name: "a", Owner: "o", Kind: driver.Exclusive}); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Backend(nil).Release: %v", err)
	}
	if _, err := b.Inspect(ctx, "a", driver.Exclusive); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Backend(nil).Inspect: %v", err)
	}

	s := r.tel.Store(nil)
	if err := s.Put(ctx, "k", 1, []byte("v")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Store(nil).Put: %v", err)
	}
	if err := s.Delete(ctx, "k", 1); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Store(nil).Delete: %v", err)
	}
	if err := s.Advance(ctx, "k", 1); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Store(nil).Advance: %v", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Store(nil).Get: %v", err)
	}

	lease, err := lock.New(memory.NewBackend(), nil).Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	plain = lease.Fenced(nil).Put(ctx, "k", []byte("v"))
	traced = lease.Fenced(r.tel.Store(nil)).Put(ctx, "k", []byte("v"))
	if !errors.Is(plain, fence.ErrInvalid) || !errors.Is(traced, fence.ErrInvalid) {
		t.Fatalf("Fenced(nil).Put: %v without fenceotel, %v with it; want ErrInvalid both", plain, traced)
	}

	if n := len(r.spans.Started()); n != 0 {
		t.Fatalf("%d spans started for refused calls, want none", n)
	}
}

// panickyBackend and panickyStore panic on every write.
type panickyBackend struct{ driver.Backend }

func (panickyBackend) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	panic("backend bug")
}

type panickyStore struct{ fence.Store }

func (panickyStore) Put(context.Context, string, fence.Token, []byte) error { panic("store bug") }

// TestPanicEndsSpan: a wrapped call that panics still ends its span, with
// status Error, and the panic reaches the caller unchanged.
func TestPanicEndsSpan(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	recovered := func(f func()) (v any) {
		defer func() { v = recover() }()
		f()
		return nil
	}
	if v := recovered(func() {
		_, _ = r.tel.Backend(panickyBackend{}).Acquire(ctx, driver.Request{Name: "a", Owner: "o", TTL: time.Minute, Kind: driver.Exclusive})
	}); v != "backend bug" {
		t.Fatalf("recovered %v, want the backend's panic", v)
	}
	if v := recovered(func() { _ = r.tel.Store(panickyStore{}).Put(ctx, "k", 1, nil) }); v != "store bug" {
		t.Fatalf("recovered %v, want the store's panic", v)
	}
	started, ended := r.spans.Started(), r.spans.Ended()
	if len(started) != 2 || len(ended) != 2 {
		t.Fatalf("%d spans started, %d ended; want 2 and 2", len(started), len(ended))
	}
	for _, s := range ended {
		if s.Status().Code != codes.Error || s.Status().Description != "panic" {
			t.Errorf("span %s: status %v, want Error \"panic\"", s.Name(), s.Status())
		}
	}
}
