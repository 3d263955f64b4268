package drivertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/wirestore"
	"github.com/fencekit/fencekit/lock/driver"
)

// noPermits is a third-party backend without permits: it answers
// driver.ErrUnsupported to every call about a permit, changing nothing.
type noPermits struct{ driver.Backend }

func refuse(k driver.Kind) error { return fmt.Errorf("%w: no %v permits", driver.ErrUnsupported, k) }

func (b noPermits) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind.Permit() {
		return driver.Grant{}, refuse(req.Kind)
	}
	return b.Backend.Acquire(ctx, req)
}

func (b noPermits) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if c.Kind.Permit() {
		return refuse(c.Kind)
	}
	return b.Backend.Extend(ctx, c, ttl)
}

func (b noPermits) Release(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return refuse(c.Kind)
	}
	return b.Backend.Release(ctx, c)
}

func (b noPermits) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind.Permit() {
		return refuse(c.Kind)
	}
	return b.Backend.Await(ctx, c, max)
}

func (b noPermits) Leave(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return refuse(c.Kind)
	}
	return b.Backend.Leave(ctx, c)
}

func (b noPermits) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if kind.Permit() {
		return driver.Info{}, refuse(kind)
	}
	return b.Backend.Inspect(ctx, name, kind)
}

// TestRefusedPermitsAreGaps: on a backend that answers ErrUnsupported to
// permits, every permit check is skipped as a gap (the list holds only
// subtests that were skipped), none is passed, the list names each one,
// and the checks of locks beside them still run and pass.
func TestRefusedPermitsAreGaps(t *testing.T) {
	var permits []Check
	for _, c := range Checks() {
		if strings.HasPrefix(c.Name, "Permits/") {
			permits = append(permits, c)
		}
	}
	if len(permits) < 16 {
		t.Fatalf("%d permit checks; want every check of semaphores and read-write locks", len(permits))
	}
	// The permit checks, and beside them checks of locks that must pass.
	locks := []Check{backendChecks()[0], queueChecks()[0], resumeChecks()[0]}
	var gaps []gap
	var passed bool
	t.Run("a backend without permits", func(t *testing.T) {
		gaps = runChecks(t, append(locks, permits...), func(*testing.T) driver.Backend { return noPermits{memory.NewBackend()} })
		passed = !t.Failed()
		t.Log(gapReport(gaps))
	})
	if !passed {
		t.Fatal("a check failed on a backend whose only gap is permits; a gap must be a skip")
	}
	if len(gaps) != len(permits) {
		t.Errorf("%d gaps; want one for each of the %d permit checks:\n%s", len(gaps), len(permits), gapReport(gaps))
	}
	report := gapReport(gaps)
	for i, c := range permits {
		if i >= len(gaps) || gaps[i].check != c.Name {
			t.Errorf("gap %d is %+v; want %s", i, gaps[min(i, len(gaps)-1)], c.Name)
			continue
		}
		if g := gaps[i]; !strings.Contains(g.shape, "semaphore") && !strings.Contains(g.shape, "read-write lock") {
			t.Errorf("%s: gap of shape %q; want semaphore or read-write lock", c.Name, g.shape)
		}
		if !strings.Contains(report, "\n  "+c.Name+": ") {
			t.Errorf("the report does not name %s:\n%s", c.Name, report)
		}
	}
	for _, c := range locks {
		if strings.Contains(report, c.Name) {
			t.Errorf("the check of locks %s is reported as a gap:\n%s", c.Name, report)
		}
	}
}

// TestRequestShapes names what a gap reports.
func TestRequestShapes(t *testing.T) {
	for _, tc := range []struct {
		req  driver.Request
		want string
	}{
		{driver.Request{Kind: driver.Exclusive}, "lock"},
		{driver.Request{Kind: driver.Exclusive, Place: time.Second}, "lock waiting in line"},
		{driver.Request{Kind: driver.Exclusive, Names: []string{"a"}}, "set of locks"},
		{driver.Request{Kind: driver.Exclusive, Resume: true}, "resume"},
		{driver.Request{Kind: driver.Semaphore, Limit: 2}, "semaphore"},
		{driver.Request{Kind: driver.Read, Place: time.Second}, "read-write lock waiting in line"},
		{driver.Request{Kind: driver.Write}, "read-write lock"},
	} {
		if got := requestShape(tc.req); got != tc.want {
			t.Errorf("requestShape(%+v) = %q; want %q", tc.req, got, tc.want)
		}
	}
}

// TestRefusedPermitsAreFaultGaps: the fault kit reports a backend's
// refused shape as RunFaults' gaps too, and runs the rest.
func TestRefusedPermitsAreFaultGaps(t *testing.T) {
	srv, err := wirestore.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	newBackend := func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
		c := wirestore.NewClient(srv.Addr(), dial, wirestore.Defects{})
		t.Cleanup(func() { _ = c.Close() })
		return noPermits{c}
	}
	var gaps []gap
	t.Run("a network backend without permits", func(t *testing.T) {
		gaps = runFaults(t, srv.Addr(), newBackend, nil)
		t.Log(gapReport(gaps))
	})
	var want []string
	for _, c := range FaultChecks() {
		if strings.HasPrefix(c.Name, "Permit") {
			want = append(want, c.Name)
		}
	}
	if len(want) == 0 || len(gaps) != len(want) {
		t.Fatalf("gaps %+v; want one for each permit fault check %v", gaps, want)
	}
	for i, g := range gaps {
		if g.check != want[i] || g.shape != "semaphore" {
			t.Errorf("gap %+v; want %s, semaphore", g, want[i])
		}
	}
}
