package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Tests of what the Client does over the driver contract (lock/driver):
// the calls it makes in the background keep the caller's context values,
// Inspect reports every shape, Lease.TTL answers for its own lease only,
// and a driver's ErrUnsupported reaches the caller.

// traceKey is the key of a value a caller puts in its context, as a tracer
// does with its span.
type traceKey struct{}

// ctxCall is one call a ctxRecorder saw: the method, the request's place
// for Acquire, and the traceKey value its context carried.
type ctxCall struct {
	op    string
	place time.Duration
	value any
}

// ctxRecorder records every call it passes on, with the traceKey value of
// its context, as a tracing wrapper around a driver would read it.
type ctxRecorder struct {
	driver.Backend
	mu    sync.Mutex
	calls []ctxCall
}

func (r *ctxRecorder) record(ctx context.Context, op string, place time.Duration) {
	r.mu.Lock()
	r.calls = append(r.calls, ctxCall{op: op, place: place, value: ctx.Value(traceKey{})})
	r.mu.Unlock()
}

func (r *ctxRecorder) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	r.record(ctx, "Acquire", req.Place)
	return r.Backend.Acquire(ctx, req)
}

func (r *ctxRecorder) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	r.record(ctx, "Extend", 0)
	return r.Backend.Extend(ctx, c, ttl)
}

func (r *ctxRecorder) Release(ctx context.Context, c driver.Claim) error {
	r.record(ctx, "Release", 0)
	return r.Backend.Release(ctx, c)
}

func (r *ctxRecorder) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	r.record(ctx, "Await", 0)
	return r.Backend.Await(ctx, c, max)
}

func (r *ctxRecorder) Leave(ctx context.Context, c driver.Claim) error {
	r.record(ctx, "Leave", 0)
	return r.Backend.Leave(ctx, c)
}

func (r *ctxRecorder) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	r.record(ctx, "Inspect", 0)
	return r.Backend.Inspect(ctx, name, kind)
}

// of returns the calls of op seen so far.
func (r *ctxRecorder) of(op string) []ctxCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ctxCall
	for _, c := range r.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

// expectValue fails the test unless every call in calls carried want.
func expectValue(t *testing.T, what string, calls []ctxCall, want any) {
	t.Helper()
	for i, c := range calls {
		if c.value != want {
			t.Errorf("%s %d of %d: the driver saw %v in its context; want the caller's %v", what, i+1, len(calls), c.value, want)
		}
	}
}

// TestKeepAliveRenewalsKeepTheCallersValues: the keep-alive's renewals run
// in the background, after the context given to Acquire has ended, and
// still carry its values.
func TestKeepAliveRenewalsKeepTheCallersValues(t *testing.T) {
	for name, acquire := range map[string]func(*lock.Client, context.Context) (*lock.Lease, error){
		"Acquire": func(c *lock.Client, ctx context.Context) (*lock.Lease, error) {
			return c.Acquire(ctx, "job", time.Minute)
		},
		"TryAcquire": func(c *lock.Client, ctx context.Context) (*lock.Lease, error) {
			return c.TryAcquire(ctx, "job", time.Minute)
		},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &ctxRecorder{Backend: memory.NewBackend()}
			c := lock.New(rec, &lock.Options{KeepAlive: true, KeepAliveInterval: keepAliveFast})
			ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "trace-1"))
			l, err := acquire(c, ctx)
			if err != nil {
				t.Fatal(err)
			}
			cancel() // the caller's call is over; its lease is not
			eventually(t, "keep-alive renewals", func() bool { return len(rec.of("Extend")) >= 2 })
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			expectValue(t, "keep-alive renewal", rec.of("Extend"), "trace-1")
			expectValue(t, "acquire", rec.of("Acquire"), "trace-1")
		})
	}
}

// TestDoReleaseKeepsTheCallersValues: Do releases its lease after fn
// returned, when the caller's context may have ended; the release carries
// the context's values all the same. So do the set's renewals and release
// of DoMulti.
func TestDoReleaseKeepsTheCallersValues(t *testing.T) {
	rec := &ctxRecorder{Backend: memory.NewBackend()}
	c := lock.New(rec, &lock.Options{KeepAliveInterval: keepAliveFast})
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "trace-do"))
	defer cancel()
	err := c.Do(ctx, "job", time.Minute, func(fctx context.Context, _ *lock.Lease) error {
		eventually(t, "Do's renewals", func() bool { return len(rec.of("Extend")) >= 1 })
		cancel()
		await(t, fctx.Done(), "fn's context after the caller's ended")
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	releases := rec.of("Release")
	if len(releases) != 1 {
		t.Fatalf("%d releases; want 1", len(releases))
	}
	expectValue(t, "Do's release after its context ended", releases, "trace-do")
	expectValue(t, "Do's renewal", rec.of("Extend"), "trace-do")
	expectFree(t, rec, "job")

	mrec := &ctxRecorder{Backend: memory.NewBackend()}
	mc := lock.New(mrec, &lock.Options{KeepAliveInterval: keepAliveFast})
	mctx, mcancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "trace-set"))
	defer mcancel()
	err = mc.DoMulti(mctx, []string{"a", "b"}, time.Minute, func(fctx context.Context, _ *lock.MultiLease) error {
		eventually(t, "DoMulti's renewals", func() bool { return len(mrec.of("Extend")) >= 2 })
		mcancel()
		await(t, fctx.Done(), "fn's context after the caller's ended")
		return nil
	})
	if err != nil {
		t.Fatalf("DoMulti: %v", err)
	}
	if n := len(mrec.of("Release")); n != 2 {
		t.Fatalf("%d releases of the set; want 2", n)
	}
	expectValue(t, "DoMulti's release after its context ended", mrec.of("Release"), "trace-set")
	expectValue(t, "DoMulti's renewal", mrec.of("Extend"), "trace-set")
}

// TestQueuedWaiterKeepsTheCallersValues: a waiter in line renews its place
// (an Acquire with a place), waits to be woken and, when it gives up, leaves
// the line after its context has ended: every one of those calls carries
// the caller's values.
func TestQueuedWaiterKeepsTheCallersValues(t *testing.T) {
	mem := memory.NewBackend()
	if _, err := takeLock(context.Background(), mem, "job", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := &ctxRecorder{Backend: mem}
	c := lock.New(rec, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 30 * time.Millisecond}}) // renewals every 10ms
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "trace-q"))
	done := run(func() error {
		_, err := c.Acquire(ctx, "job", time.Minute)
		return err
	})
	eventually(t, "the waiter's place renewed", func() bool { return len(rec.of("Acquire")) >= 3 })
	cancel()
	if err := await(t, done, "the waiter giving up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire = %v; want the cancelled context", err)
	}
	places := rec.of("Acquire")
	for _, p := range places {
		if p.place <= 0 {
			t.Fatalf("an Acquire without a place %+v; want every attempt to keep the waiter's place", p)
		}
	}
	expectValue(t, "place renewal", places, "trace-q")
	expectValue(t, "await", rec.of("Await"), "trace-q")
	leaves := rec.of("Leave")
	if len(leaves) != 1 {
		t.Fatalf("%d Leave calls; want 1 when the waiter gave up", len(leaves))
	}
	expectValue(t, "Leave after the context ended", leaves, "trace-q")
	if w := mem.Waiting("job"); len(w) != 0 {
		t.Fatalf("still in line: %q", w)
	}
}

// countInspects counts the Inspect calls that reach the driver.
type countInspects struct {
	driver.Backend
	n atomic.Int64
}

func (c *countInspects) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	c.n.Add(1)
	return c.Backend.Inspect(ctx, name, kind)
}

// TestClientInspectReportsTheLock: Client.Inspect reports the holder of a
// lock (owner, token, remaining TTL, metadata) and how many wait in line,
// and refuses a bad name before anything is sent.
func TestClientInspectReportsTheLock(t *testing.T) {
	ctx := context.Background()
	b := &countInspects{Backend: memory.NewBackend()}
	c := lock.New(b, &lock.Options{Metadata: "host=a pid=1"})

	info, err := c.Inspect(ctx, "job")
	if err != nil || info.Held() || len(info.Holders) != 0 || info.Waiting != 0 || info.Name != "job" {
		t.Fatalf("Inspect of a free lock = %+v, %v; want job, nobody holding or waiting", info, err)
	}

	l, err := c.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	waiterCtx, stopWaiter := context.WithCancel(ctx)
	waiter := run(func() error {
		_, err := lock.New(b, nil).Acquire(waiterCtx, "job", time.Minute)
		return err
	})
	eventually(t, "the waiter in line", func() bool {
		info, err := c.Inspect(ctx, "job")
		return err == nil && info.Waiting == 1
	})
	info, err = c.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held() || len(info.Holders) != 1 {
		t.Fatalf("Inspect of a held lock = %+v; want one holder", info)
	}
	h := info.Holders[0]
	if h.Owner != l.Owner() || h.Token != l.Token() || h.TTL <= 0 || h.TTL > time.Minute || h.Metadata != "host=a pid=1" || h.Writer {
		t.Fatalf("holder %+v; want owner %s, token %d, a TTL up to a minute, the metadata, no writer", h, l.Owner(), l.Token())
	}
	if info.Name != "job" || info.Waiting != 1 || info.Limit != 0 || info.LastWriter != 0 {
		t.Fatalf("Inspect = %+v; want job with one waiting, no limit, no last writer", info)
	}
	stopWaiter()
	if err := await(t, waiter, "the waiter giving up"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("waiter: %v", err)
	}

	before := b.n.Load()
	for _, name := range []string{"", "a\x00b", strings.Repeat("x", fence.MaxKeyLen+1)} {
		if _, err := c.Inspect(ctx, name); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Inspect(%.20q) = %v; want ErrInvalid", name, err)
		}
	}
	if _, err := (*lock.Client)(nil).Inspect(ctx, "job"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Inspect on a nil Client = %v; want ErrInvalid", err)
	}
	if _, err := lock.New(nil, nil).Inspect(ctx, "job"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Inspect without a backend = %v; want ErrInvalid", err)
	}
	if n := b.n.Load() - before; n != 0 {
		t.Fatalf("%d Inspect calls sent for bad input; want 0", n)
	}
}

// TestClientInspectSeesLocksOnly: a lock and a permit name of the same name
// are apart; Client.Inspect reports the lock.
func TestClientInspectSeesLocksOnly(t *testing.T) {
	ctx := context.Background()
	c := lock.New(memory.NewBackend(), nil)
	p, err := c.Semaphore("job", 2).TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if info, err := c.Inspect(ctx, "job"); err != nil || info.Held() {
		t.Fatalf("Client.Inspect with only a permit of the name held = %+v, %v; want the lock free", info, err)
	}
	if info, err := c.Semaphore("job", 2).Inspect(ctx); err != nil || len(info.Holders) != 1 {
		t.Fatalf("Semaphore.Inspect = %+v, %v; want the permit", info, err)
	}
}

// holderOf returns the holder of info whose owner is owner.
func holderOf(t *testing.T, info lock.Info, owner string) lock.Holder {
	t.Helper()
	for _, h := range info.Holders {
		if h.Owner == owner {
			return h
		}
	}
	t.Fatalf("%s holds nothing in %+v", owner, info)
	return lock.Holder{}
}

// TestSemaphoreInspectReportsPermits: Semaphore.Inspect reports the limit,
// every live permit with its owner, token and TTL, and the waiters; an idle
// semaphore has no limit to report.
func TestSemaphoreInspectReportsPermits(t *testing.T) {
	ctx := context.Background()
	c := lock.New(memory.NewBackend(), nil)
	sem := c.Semaphore("pool", 2)
	if info, err := sem.Inspect(ctx); err != nil || info.Name != "pool" || info.Limit != 0 || len(info.Holders) != 0 || info.Waiting != 0 {
		t.Fatalf("Inspect of an idle semaphore = %+v, %v; want pool, no limit, nobody", info, err)
	}
	a, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := sem.TryAcquire(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	waiterCtx, stopWaiter := context.WithCancel(ctx)
	waiter := run(func() error {
		_, err := sem.Acquire(waiterCtx, time.Minute)
		return err
	})
	eventually(t, "the waiter in line", func() bool {
		info, err := sem.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	info, err := sem.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Limit != 2 || len(info.Holders) != 2 || info.Waiting != 1 || info.LastWriter != 0 {
		t.Fatalf("Inspect = %+v; want limit 2, two permits, one waiting, no last writer", info)
	}
	for _, l := range []*lock.Lease{a, b} {
		h := holderOf(t, info, l.Owner())
		if h.Token != l.Token() || h.Writer || h.TTL <= 0 {
			t.Errorf("permit %+v; want token %d, not a writer, a live TTL", h, l.Token())
		}
	}
	if ha, hb := holderOf(t, info, a.Owner()), holderOf(t, info, b.Owner()); ha.TTL <= hb.TTL || ha.TTL > time.Minute || hb.TTL > 30*time.Second {
		t.Errorf("TTLs %v and %v; want each permit's own (a minute, 30s)", ha.TTL, hb.TTL)
	}
	stopWaiter()
	await(t, waiter, "the waiter giving up")
}

// TestRWLockInspectReportsWritersAndReaders: RWLock.Inspect marks the
// write permit (Writer), lists the readers, counts a writer waiting, and
// keeps the newest writer's token (LastWriter) after it left.
func TestRWLockInspectReportsWritersAndReaders(t *testing.T) {
	ctx := context.Background()
	c := lock.New(memory.NewBackend(), nil)
	rw := c.RWLock("prices")
	w, err := rw.TryAcquireWrite(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info, err := rw.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || !info.Holders[0].Writer || info.Holders[0].Owner != w.Owner() || info.Holders[0].Token != w.Token() ||
		info.LastWriter != w.Token() || info.Limit != 0 || info.Name != "prices" {
		t.Fatalf("Inspect with a writer = %+v; want its write permit (token %d) and it as last writer", info, w.Token())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := rw.TryAcquireRead(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	r2, err := rw.TryAcquireRead(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Release(ctx)
	waiterCtx, stopWaiter := context.WithCancel(ctx)
	waiter := run(func() error {
		_, err := rw.AcquireWrite(waiterCtx, time.Minute)
		return err
	})
	eventually(t, "the writer in line", func() bool {
		info, err := rw.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	info, err = rw.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 2 || info.Waiting != 1 || info.LastWriter != w.Token() || info.Limit != 0 {
		t.Fatalf("Inspect with two readers = %+v; want them, one writer waiting, last writer %d", info, w.Token())
	}
	for _, r := range []*lock.Lease{r1, r2} {
		if h := holderOf(t, info, r.Owner()); h.Writer || h.Token != r.Token() {
			t.Errorf("reader %+v; want token %d, not a writer", h, r.Token())
		}
	}
	stopWaiter()
	await(t, waiter, "the writer giving up")
}

// scriptedInspect answers every Inspect with holders, whatever the name.
type scriptedInspect struct {
	driver.Backend
	holders []driver.Holder
}

func (s *scriptedInspect) Inspect(_ context.Context, name string, kind driver.Kind) (driver.Info, error) {
	return driver.Info{Name: name, Kind: kind, Holders: s.holders}, nil
}

// TestLeaseTTLCountsItsOwnEntryOnly: Lease.TTL reports the TTL of the
// holder with the lease's owner and token; a holder with the same owner but
// another token (the owner value re-used for a newer lease, say), or with
// the same token but another owner, is not this lease, which is then not
// held.
func TestLeaseTTLCountsItsOwnEntryOnly(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		holders func(l *lock.Lease) []driver.Holder
		want    time.Duration // 0: not held
	}{
		{"its own entry", func(l *lock.Lease) []driver.Holder {
			return []driver.Holder{{Owner: l.Owner(), Token: l.Token(), TTL: 7 * time.Second}}
		}, 7 * time.Second},
		{"its own among others", func(l *lock.Lease) []driver.Holder {
			return []driver.Holder{
				{Owner: "other", Token: l.Token() + 1, TTL: time.Second},
				{Owner: l.Owner(), Token: l.Token() + 1, TTL: 2 * time.Second},
				{Owner: l.Owner(), Token: l.Token(), TTL: 3 * time.Second},
			}
		}, 3 * time.Second},
		{"same owner, another token", func(l *lock.Lease) []driver.Holder {
			return []driver.Holder{{Owner: l.Owner(), Token: l.Token() + 1, TTL: 7 * time.Second}}
		}, 0},
		{"same token, another owner", func(l *lock.Lease) []driver.Holder {
			return []driver.Holder{{Owner: "other", Token: l.Token(), TTL: 7 * time.Second}}
		}, 0},
		{"nobody", func(*lock.Lease) []driver.Holder { return nil }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scriptedInspect{Backend: memory.NewBackend()}
			l, err := lock.New(s, nil).TryAcquire(ctx, "job", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			s.holders = tc.holders(l)
			got, err := l.TTL(ctx)
			switch {
			case tc.want > 0 && (err != nil || got != tc.want || l.Err() != nil):
				t.Fatalf("TTL = %v, %v (Err %v); want %v, the lease live", got, err, l.Err(), tc.want)
			case tc.want == 0 && (!errors.Is(err, lock.ErrNotHeld) || got != 0 || !errors.Is(l.Err(), lock.ErrLost)):
				t.Fatalf("TTL = %v, %v (Err %v); want 0 and ErrNotHeld, the lease lost", got, err, l.Err())
			}
		})
	}
}

// TestLeaseTTLAfterTheOwnerTookTheLockAgain: the lease expired on the
// backend and the same owner value took the lock again, with a new token:
// the new lease's TTL is not this lease's.
func TestLeaseTTLAfterTheOwnerTookTheLockAgain(t *testing.T) {
	ctx := context.Background()
	mem := memory.NewBackend()
	old, err := lock.New(mem, nil).TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mem.Expire("job")
	tok, err := takeLock(ctx, mem, "job", old.Owner(), time.Minute)
	if err != nil || tok == old.Token() {
		t.Fatalf("the same owner again: token %d, %v; want a new token", tok, err)
	}
	defer releaseLock(ctx, mem, "job", old.Owner())
	if got, err := old.TTL(ctx); !errors.Is(err, lock.ErrNotHeld) || got != 0 {
		t.Fatalf("TTL of the expired lease = %v, %v; want 0 and ErrNotHeld", got, err)
	}
	if !errors.Is(old.Err(), lock.ErrLost) {
		t.Fatalf("Err = %v; want ErrLost", old.Err())
	}
}

// TestPermitTTLIsItsOwn: each permit of a semaphore reports its own TTL.
func TestPermitTTLIsItsOwn(t *testing.T) {
	ctx := context.Background()
	sem := lock.New(memory.NewBackend(), nil).Semaphore("pool", 2)
	long, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Release(ctx)
	short, err := sem.TryAcquire(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Release(ctx)
	lt, err := long.TTL(ctx)
	if err != nil || lt <= 10*time.Second || lt > time.Minute {
		t.Fatalf("the one-minute permit's TTL = %v, %v", lt, err)
	}
	st, err := short.TTL(ctx)
	if err != nil || st <= 0 || st > 10*time.Second {
		t.Fatalf("the ten-second permit's TTL = %v, %v", st, err)
	}
}

// unsupportedShapes is a driver that cannot offer some shapes, as a
// third-party backend may: its Acquire answers driver.ErrUnsupported for
// every request refuse says, and changes nothing. It counts the Acquire
// and Await calls.
type unsupportedShapes struct {
	driver.Backend
	refuse   func(driver.Request) bool
	mu       sync.Mutex
	acquires []driver.Request
	awaits   atomic.Int64
}

func (u *unsupportedShapes) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	u.mu.Lock()
	u.acquires = append(u.acquires, req)
	u.mu.Unlock()
	if u.refuse(req) {
		return driver.Grant{}, driver.ErrUnsupported
	}
	return u.Backend.Acquire(ctx, req)
}

func (u *unsupportedShapes) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	u.awaits.Add(1)
	return u.Backend.Await(ctx, c, max)
}

func (u *unsupportedShapes) requests() []driver.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]driver.Request(nil), u.acquires...)
}

// TestUnsupportedPermitsReachTheCaller: a driver without permits answers
// ErrUnsupported; every permit call returns that error after the one
// request, blocking or not, queued or polling: the Client neither retries
// nor waits.
func TestUnsupportedPermitsReachTheCaller(t *testing.T) {
	fn := func(context.Context, *lock.Lease) error { return errors.New("fn ran without a permit") }
	for name, call := range map[string]func(*lock.Client, context.Context) error{
		"Semaphore.TryAcquire": func(c *lock.Client, ctx context.Context) error {
			_, err := c.Semaphore("s", 2).TryAcquire(ctx, time.Minute)
			return err
		},
		"Semaphore.Acquire": func(c *lock.Client, ctx context.Context) error {
			_, err := c.Semaphore("s", 2).Acquire(ctx, time.Minute)
			return err
		},
		"Semaphore.Do": func(c *lock.Client, ctx context.Context) error { return c.Semaphore("s", 2).Do(ctx, time.Minute, fn) },
		"RWLock.AcquireRead": func(c *lock.Client, ctx context.Context) error {
			_, err := c.RWLock("rw").AcquireRead(ctx, time.Minute)
			return err
		},
		"RWLock.TryAcquireWrite": func(c *lock.Client, ctx context.Context) error {
			_, err := c.RWLock("rw").TryAcquireWrite(ctx, time.Minute)
			return err
		},
		"RWLock.DoWrite": func(c *lock.Client, ctx context.Context) error { return c.RWLock("rw").DoWrite(ctx, time.Minute, fn) },
	} {
		for _, queue := range []lock.QueueOptions{{}, polling} {
			u := &unsupportedShapes{Backend: memory.NewBackend(), refuse: func(r driver.Request) bool { return r.Kind.Permit() }}
			c := lock.New(u, &lock.Options{Queue: queue, MinBackoff: time.Millisecond})
			ctx := boundedCtx(t)
			err := await(t, run(func() error { return call(c, ctx) }), name)
			if !errors.Is(err, lock.ErrUnsupported) || !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("%s (polling %v) = %v; want ErrUnsupported and ErrNotAcquired", name, queue.Polling, err)
			}
			if n := len(u.requests()); n != 1 {
				t.Errorf("%s (polling %v): %d requests; want the one, not retried", name, queue.Polling, n)
			}
			if n := u.awaits.Load(); n != 0 {
				t.Errorf("%s (polling %v): waited in line %d times; want never", name, queue.Polling, n)
			}
		}
	}
	// Locks on the same driver work as ever.
	u := &unsupportedShapes{Backend: memory.NewBackend(), refuse: func(r driver.Request) bool { return r.Kind.Permit() }}
	if err := lock.New(u, nil).Do(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error { return nil }); err != nil {
		t.Fatalf("a lock on a driver without permits: %v", err)
	}
}

// TestUnsupportedSetsReachTheCaller: a driver that answers a set with
// ErrUnsupported (not ErrNotAtomic) gets that error back, and the Client
// does not take the names one by one instead.
func TestUnsupportedSetsReachTheCaller(t *testing.T) {
	for name, call := range map[string]func(*lock.Client, context.Context) error{
		"TryAcquireMulti": func(c *lock.Client, ctx context.Context) error {
			_, err := c.TryAcquireMulti(ctx, []string{"a", "b"}, time.Minute)
			return err
		},
		"AcquireMulti": func(c *lock.Client, ctx context.Context) error {
			_, err := c.AcquireMulti(ctx, []string{"a", "b"}, time.Minute)
			return err
		},
		"DoMulti": func(c *lock.Client, ctx context.Context) error {
			return c.DoMulti(ctx, []string{"a", "b"}, time.Minute, func(context.Context, *lock.MultiLease) error { return nil })
		},
	} {
		for _, queue := range []lock.QueueOptions{{}, polling} {
			mem := memory.NewBackend()
			u := &unsupportedShapes{Backend: mem, refuse: func(r driver.Request) bool { return r.Names != nil }}
			c := lock.New(u, &lock.Options{Queue: queue, MinBackoff: time.Millisecond})
			ctx := boundedCtx(t)
			err := await(t, run(func() error { return call(c, ctx) }), name)
			if !errors.Is(err, lock.ErrUnsupported) || !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("%s (polling %v) = %v; want ErrUnsupported and ErrNotAcquired", name, queue.Polling, err)
			}
			reqs := u.requests()
			if len(reqs) != 1 || reqs[0].Names == nil {
				t.Errorf("%s (polling %v): requests %+v; want the one set request, no name taken alone", name, queue.Polling, reqs)
			}
			expectFree(t, mem, "a")
			expectFree(t, mem, "b")
		}
	}
}
