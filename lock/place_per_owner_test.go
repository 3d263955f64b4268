package lock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// placeLog follows, per owner and name, whether the owner may have a place
// in line (a request with a place that was not admitted keeps one; an
// admission or a Leave drops it), and notes every request without a place
// sent while the owner may have one.
type placeLog struct {
	driver.Backend
	mu        sync.Mutex
	mayHave   map[[2]string]bool // {owner, name} -> may have a place
	withPlace int                // requests with a place
	mixed     []string           // requests without a place sent while one may be held
}

func (p *placeLog) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	names := req.Names
	if names == nil {
		names = []string{req.Name}
	}
	p.mu.Lock()
	for _, n := range names {
		if k := [2]string{req.Owner, n}; req.Place == 0 && p.mayHave[k] {
			p.mixed = append(p.mixed, fmt.Sprintf("owner %.8s asked for %q without a place while it may have one", req.Owner, n))
		}
	}
	p.mu.Unlock()
	g, err := p.Backend.Acquire(ctx, req)
	if req.Place > 0 {
		p.mu.Lock()
		p.withPlace++
		p.mayHave[[2]string{req.Owner, req.Name}] = err != nil
		p.mu.Unlock()
	}
	return g, err
}

func (p *placeLog) Leave(ctx context.Context, c driver.Claim) error {
	err := p.Backend.Leave(ctx, c)
	if err == nil {
		p.mu.Lock()
		p.mayHave[[2]string{c.Owner, c.Name}] = false
		p.mu.Unlock()
	}
	return err
}

// The driver contract lets a backend keep an owner's place when that owner
// is admitted by a request without a place, because the Client never sends
// one while the owner may have a place on the name: a blocking acquire asks
// with its place until an admission in line drops it (a set then takes the
// whole set without a place) or it leaves the line. Every blocking shape is
// driven here through contention (a lock, a set, a semaphore, both kinds of
// a read-write lock), and every request without a place is checked against
// what the owner may hold in line at that moment.
func TestClientNeverAsksWithoutAPlaceWhileItMayHaveOne(t *testing.T) {
	ctx := context.Background()
	log := &placeLog{Backend: memory.NewBackend(), mayHave: map[[2]string]bool{}}
	c := lock.New(log, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: time.Second}})

	// Hold each name briefly, so that every blocking call below waits in
	// line for it, then is served.
	hold := func(take func() (*lock.Lease, error)) {
		t.Helper()
		l, err := take()
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(50*time.Millisecond, func() { _ = l.Release(context.Background()) })
	}
	try := func(l *lock.Lease, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}

	hold(func() (*lock.Lease, error) { return c.TryAcquire(ctx, "a", time.Minute) })
	try(c.Acquire(ctx, "a", time.Minute))
	try(c.TryAcquire(ctx, "a", time.Minute))

	hold(func() (*lock.Lease, error) { return c.TryAcquire(ctx, "b", time.Minute) })
	m, err := c.AcquireMulti(ctx, []string{"a", "b", "c"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Release(ctx)

	sem := c.Semaphore("s", 1)
	hold(func() (*lock.Lease, error) { return sem.TryAcquire(ctx, time.Minute) })
	try(sem.Acquire(ctx, time.Minute))

	rw := c.RWLock("rw")
	hold(func() (*lock.Lease, error) { return rw.TryAcquireWrite(ctx, time.Minute) })
	try(rw.AcquireRead(ctx, time.Minute))
	hold(func() (*lock.Lease, error) { return rw.TryAcquireRead(ctx, time.Minute) })
	try(rw.AcquireWrite(ctx, time.Minute))

	log.mu.Lock()
	defer log.mu.Unlock()
	for _, m := range log.mixed {
		t.Error(m)
	}
	if log.withPlace < 5 {
		t.Fatalf("%d requests with a place; want every blocking call (5) to have waited in line", log.withPlace)
	}
}
