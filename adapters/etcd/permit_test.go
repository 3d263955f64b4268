package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

const permitTTL, permitPlace = 10 * time.Second, 10 * time.Second

func sem(n int, place time.Duration) driver.Request {
	return driver.Request{Kind: driver.Semaphore, Limit: n, TTL: permitTTL, Place: place}
}

func rw(kind driver.Kind, place time.Duration) driver.Request {
	return driver.Request{Kind: kind, TTL: permitTTL, Place: place}
}

// keysUnder counts the keys under key, to show what a call wrote.
func keysUnder(t *testing.T, cl *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cl.Get(testkit.Context(t), key, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// awaitGrant waits in line until owner is granted req, for at most 20 s.
func awaitGrant(ctx context.Context, b *fenceetcd.Backend, name, owner string, req driver.Request) (driver.Grant, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		p, err := acquirePermit(ctx, b, name, owner, req)
		if !errors.Is(err, lock.ErrHeld) {
			return p, err
		}
		if err := awaitPermit(ctx, b, name, owner, time.Second); err != nil {
			return driver.Grant{}, err
		}
	}
}

// TestPermitSemaphoreNeverOverLimit: 16 contenders on a semaphore of 3,
// each taking a permit three times, queued (acquirePermit with a place,
// awaitPermit between attempts). A contender counts itself in after its
// grant and out before its release, so the count is never above the
// server's holders: above 3 means a fourth permit was granted; while
// counted in it also reads the holder keys, which must number 3 at most.
// Every token is fresh.
func TestPermitSemaphoreNeverOverLimit(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	const contenders, limit, rounds = 16, 3, 3
	var in, most atomic.Int64
	var mu sync.Mutex
	tokens := map[fence.Token]bool{}
	start := make(chan struct{})
	errs := make(chan error, contenders)
	for range contenders {
		o := testkit.Owner(t)
		go func() {
			<-start
			for range rounds {
				p, err := awaitGrant(ctx, b, "sem", o, sem(limit, permitPlace))
				if err != nil {
					errs <- err
					return
				}
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				dup := tokens[p.Token]
				tokens[p.Token] = true
				mu.Unlock()
				// Hold the permit over a read of the holders (the server's
				// count must be within the limit too), so that holdings
				// overlap.
				held, err := cl.Get(ctx, b.PermitKey("sem")+"h/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				in.Add(-1)
				if err != nil {
					errs <- err
					return
				}
				if held.Count > limit {
					errs <- fmt.Errorf("%d holder keys; the limit is %d", held.Count, limit)
					return
				}
				if dup {
					errs <- fmt.Errorf("token %d granted twice", p.Token)
					return
				}
				if err := releasePermit(ctx, b, "sem", o); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	close(start)
	for range contenders {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if m := most.Load(); m > limit {
		t.Fatalf("%d permits held at once; the limit is %d", m, limit)
	}
	t.Logf("at most %d permits held at once", most.Load())
	if len(tokens) != contenders*rounds {
		t.Fatalf("%d grants; want %d", len(tokens), contenders*rounds)
	}
	ps, err := inspectPermits(ctx, b, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Holders) != 0 || ps.Waiting != 0 {
		t.Fatalf("after every release: %d holders, %d waiting; want none", len(ps.Holders), ps.Waiting)
	}
}

// TestPermitReaderRefusedBesideWriter: a reader is refused while a writer
// holds, writing nothing without a place; with a place it is let in when
// the writer releases, learning the writer's token as PriorWriter.
func TestPermitReaderRefusedBesideWriter(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	w, r := testkit.Owner(t), testkit.Owner(t)
	wp, err := acquirePermit(ctx, b, "rw", w, rw(driver.Write, 0))
	if err != nil {
		t.Fatal(err)
	}
	before := keysUnder(t, cl, b.PermitKey("rw"))
	if _, err := acquirePermit(ctx, b, "rw", r, rw(driver.Read, 0)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("reader beside a writer: %v; want ErrHeld", err)
	}
	if after := keysUnder(t, cl, b.PermitKey("rw")); after != before {
		t.Fatalf("a refused reader without a place left %d keys; want %d", after, before)
	}
	if _, err := acquirePermit(ctx, b, "rw", r, rw(driver.Read, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("queued reader beside a writer: %v; want ErrHeld", err)
	}
	// The release comes while the reader is not yet in awaitPermit: its
	// wake-up must not be lost.
	if err := releasePermit(ctx, b, "rw", w); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := awaitPermit(actx, b, "rw", r, 10*time.Second); err != nil {
		t.Fatalf("awaitPermit after the writer's release: %v", err)
	}
	if actx.Err() != nil {
		t.Fatal("awaitPermit returned only at its deadline: the release's wake-up was lost")
	}
	rp, err := acquirePermit(ctx, b, "rw", r, rw(driver.Read, permitPlace))
	if err != nil {
		t.Fatalf("reader after the writer's release: %v", err)
	}
	if rp.Token <= wp.Token || rp.PriorWriter != wp.Token {
		t.Fatalf("reader got token %d, prior writer %d; want above %d and %d", rp.Token, rp.PriorWriter, wp.Token, wp.Token)
	}
}

// TestPermitWaitingWriterBlocksNewReaders: with a reader holding and a
// writer in line, a new reader is refused, with or without a place; the
// writer is let in after the first reader leaves, and the new reader after
// the writer.
func TestPermitWaitingWriterBlocksNewReaders(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	r1, w, r2 := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	if _, err := acquirePermit(ctx, b, "rw", r1, rw(driver.Read, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := acquirePermit(ctx, b, "rw", w, rw(driver.Write, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("writer beside a reader: %v; want ErrHeld", err)
	}
	for _, place := range []time.Duration{0, permitPlace} {
		if _, err := acquirePermit(ctx, b, "rw", r2, rw(driver.Read, place)); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("new reader (place %v) with a writer waiting: %v; want ErrHeld", place, err)
		}
	}
	if err := releasePermit(ctx, b, "rw", r1); err != nil {
		t.Fatal(err)
	}
	// The reader behind the writer is still refused.
	if _, err := acquirePermit(ctx, b, "rw", r2, rw(driver.Read, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("reader behind a waiting writer, the lock free: %v; want ErrHeld", err)
	}
	wp, err := awaitGrant(ctx, b, "rw", w, rw(driver.Write, permitPlace))
	if err != nil {
		t.Fatalf("writer after the reader left: %v", err)
	}
	if err := releasePermit(ctx, b, "rw", w); err != nil {
		t.Fatal(err)
	}
	rp, err := awaitGrant(ctx, b, "rw", r2, rw(driver.Read, permitPlace))
	if err != nil {
		t.Fatalf("reader after the writer: %v", err)
	}
	if rp.PriorWriter != wp.Token {
		t.Fatalf("reader's prior writer %d; want %d", rp.PriorWriter, wp.Token)
	}
}

// TestPermitTokensRiseAcrossKinds: reads, writes and, once the name is
// idle, a semaphore on the same name get strictly rising tokens; the last
// writer outlives the read-write shape.
func TestPermitTokensRiseAcrossKinds(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	var last, lastWriter fence.Token
	for i, req := range []driver.Request{
		rw(driver.Read, 0), rw(driver.Write, 0), rw(driver.Read, 0),
		rw(driver.Write, 0), sem(2, 0), rw(driver.Read, 0),
	} {
		o := testkit.Owner(t)
		p, err := acquirePermit(ctx, b, "n", o, req)
		if err != nil {
			t.Fatalf("grant %d (%v): %v", i, req.Kind, err)
		}
		if p.Token <= last {
			t.Fatalf("grant %d (%v): token %d after %d", i, req.Kind, p.Token, last)
		}
		if p.PriorWriter != lastWriter {
			t.Fatalf("grant %d (%v): prior writer %d; want %d", i, req.Kind, p.PriorWriter, lastWriter)
		}
		last = p.Token
		if req.Kind == driver.Write {
			lastWriter = p.Token
		}
		if err := releasePermit(ctx, b, "n", o); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := inspectPermits(ctx, b, "n")
	if err != nil {
		t.Fatal(err)
	}
	if ps.Kind != 0 || ps.LastWriter != lastWriter {
		t.Fatalf("idle name: kind %v, last writer %d; want 0 and %d", ps.Kind, ps.LastWriter, lastWriter)
	}
}

// TestPermitHolderExpiresByLease: a permit nobody renews is deleted by the
// cluster when its etcd lease ends; that deletion wakes the waiter in line,
// which gets a greater token, and the old holder can no longer extend.
func TestPermitHolderExpiresByLease(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	a, w := testkit.Owner(t), testkit.Owner(t)
	short := driver.Request{Kind: driver.Semaphore, Limit: 1, TTL: time.Second}
	ap, err := acquirePermit(ctx, b, "sem", a, short)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wp, err := awaitGrant(ctx, b, "sem", w, sem(1, permitPlace))
	if err != nil {
		t.Fatalf("waiter behind a permit left to expire: %v", err)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Fatalf("waiter let in after %v, before the holder's lease could end", waited)
	}
	if wp.Token <= ap.Token {
		t.Fatalf("waiter's token %d is not above the expired holder's %d", wp.Token, ap.Token)
	}
	if err := extendPermit(ctx, b, "sem", a, permitTTL); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("extendPermit of an expired permit: %v; want ErrNotHeld", err)
	}
	ps, err := inspectPermits(ctx, b, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Holders) != 1 || ps.Holders[0].Owner != w {
		t.Fatalf("holders %+v; want only the waiter", ps.Holders)
	}
}

// TestPermitHonoursContext: every method returns the context's error when
// it has ended, and awaitPermit returns at its context's deadline.
func TestPermitHonoursContext(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	o, w := testkit.Owner(t), testkit.Owner(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	calls := map[string]error{}
	_, calls["acquirePermit"] = acquirePermit(done, b, "sem", o, sem(1, permitPlace))
	calls["extendPermit"] = extendPermit(done, b, "sem", o, permitTTL)
	calls["releasePermit"] = releasePermit(done, b, "sem", o)
	calls["awaitPermit"] = awaitPermit(done, b, "sem", o, time.Second)
	calls["leavePermitLine"] = leavePermitLine(done, b, "sem", o)
	_, calls["inspectPermits"] = inspectPermits(done, b, "sem")
	for what, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v; want context.Canceled", what, err)
		}
	}
	if n := keysUnder(t, cl, b.PermitKey("sem")); n != 0 {
		t.Fatalf("%d keys written under a cancelled context", n)
	}
	if _, err := acquirePermit(ctx, b, "sem", o, sem(1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := acquirePermit(ctx, b, "sem", w, sem(1, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("queueing: %v; want ErrHeld", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	if err := awaitPermit(dctx, b, "sem", w, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("awaitPermit past its deadline: %v; want DeadlineExceeded", err)
	}
	// max passing is not an error.
	if err := awaitPermit(ctx, b, "sem", w, 100*time.Millisecond); err != nil {
		t.Fatalf("awaitPermit past max: %v; want nil", err)
	}
}

// TestPermitBadInput: bad input is ErrInvalid, and no request is sent. It
// goes through a lock.Client, which checks every request before the
// Backend sees it; the Client makes its own owners and kinds and claims
// only the permits it holds, so a request without a kind, a reader with a
// limit and claims with an empty name or owner cannot be sent through it
// (lock/driver's TestValidate refuses them).
func TestPermitBadInput(t *testing.T) {
	cl, c := countingClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	client := lock.New(b, nil)
	permit, err := client.Semaphore("held", 1).TryAcquire(ctx, permitTTL)
	if err != nil {
		t.Fatal(err)
	}
	before := c.n.Load()
	try := func(l *lock.Lease, err error) error { return err }
	queued := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: driver.MinPlaceTTL / 2}})
	bad := map[string]error{
		"Semaphore.TryAcquire, limit 0":            try(client.Semaphore("sem", 0).TryAcquire(ctx, permitTTL)),
		"Semaphore.TryAcquire, limit too high":     try(client.Semaphore("sem", driver.MaxPermits+1).TryAcquire(ctx, permitTTL)),
		"RWLock.TryAcquireWrite, ttl 0":            try(client.RWLock("sem").TryAcquireWrite(ctx, 0)),
		"RWLock.AcquireWrite, place below the min": try(queued.RWLock("sem").AcquireWrite(ctx, permitTTL)),
		"Semaphore.TryAcquire, empty name":         try(client.Semaphore("", 1).TryAcquire(ctx, permitTTL)),
		"Lease.Extend of a permit, ttl 0":          permit.Extend(ctx, 0),
	}
	_, bad["Semaphore.Inspect, empty name"] = client.Semaphore("", 1).Inspect(ctx)
	_, bad["RWLock.Inspect, empty name"] = client.RWLock("").Inspect(ctx)
	for what, err := range bad {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", what, err)
		}
	}
	if n := c.n.Load() - before; n != 0 {
		t.Fatalf("bad input sent %d requests; want none", n)
	}
	if err := permit.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPermitRoundTrips backs the costs in docs/etcd.md: a grant is 3
// requests (read Txn, LeaseGrant, Txn), a refusal without a place 1 (the
// read), a new place 3 (read, LeaseGrant, Txn), a place renewed 2 (read,
// KeepAlive), extendPermit 2 (Get, KeepAlive), releasePermit and
// leavePermitLine 1 each, inspectPermits 1 and a LeaseTimeToLive per
// holder.
func TestPermitRoundTrips(t *testing.T) {
	cl, c := countingClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	h, w := testkit.Owner(t), testkit.Owner(t)
	want := func(what string, want int64, op func() error) {
		t.Helper()
		if got := c.trips(t, what, op); got != want {
			t.Errorf("%s took %d round trips; want %d", what, got, want)
		}
	}
	held := func(err error) error {
		if errors.Is(err, lock.ErrHeld) {
			return nil
		}
		return fmt.Errorf("%v; want ErrHeld", err)
	}
	want("acquirePermit granted", 3, func() error { _, err := acquirePermit(ctx, b, "s", h, sem(1, 0)); return err })
	want("acquirePermit refused without a place", 1, func() error { _, err := acquirePermit(ctx, b, "s", w, sem(1, 0)); return held(err) })
	want("acquirePermit making a place", 3, func() error { _, err := acquirePermit(ctx, b, "s", w, sem(1, permitPlace)); return held(err) })
	want("acquirePermit renewing a place", 2, func() error { _, err := acquirePermit(ctx, b, "s", w, sem(1, permitPlace)); return held(err) })
	want("extendPermit", 2, func() error { return extendPermit(ctx, b, "s", h, permitTTL) })
	want("inspectPermits with one holder", 2, func() error { _, err := inspectPermits(ctx, b, "s"); return err })
	want("leavePermitLine", 1, func() error { return leavePermitLine(ctx, b, "s", w) })
	want("releasePermit", 1, func() error { return releasePermit(ctx, b, "s", h) })
}

// TestPermitKeyLayout backs docs/etcd.md's permit rows: the keys' names
// (escaped), the holder and the place each on an etcd lease of its own, the
// guard and the last-writer key on none, the writer key's mod revision the
// write permit's token, a permit's token its key's create revision, and
// the values: the shape, the kind waited for, the kind and prior writer.
func TestPermitKeyLayout(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	if got, want := b.PermitKey("a/b"), ns+"permit/a%2Fb/"; got != want {
		t.Fatalf("PermitKey = %q; want %q", got, want)
	}
	w, r := testkit.Owner(t), testkit.Owner(t)
	wp, err := acquirePermit(ctx, b, "a/b", w, rw(driver.Write, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquirePermit(ctx, b, "a/b", r, rw(driver.Read, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("reader beside a writer: %v; want ErrHeld", err)
	}
	p := b.PermitKey("a/b")
	get, err := cl.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kvs := map[string]*struct {
		lease, create, mod int64
		value              string
	}{}
	for _, kv := range get.Kvs {
		kvs[string(kv.Key)] = &struct {
			lease, create, mod int64
			value              string
		}{kv.Lease, kv.CreateRevision, kv.ModRevision, string(kv.Value)}
	}
	if len(kvs) != 4 {
		t.Fatalf("keys under %q: %d; want 4 (guard, writer, holder, place)", p, len(kvs))
	}
	g, wr, h, q := kvs[p+"g"], kvs[p+"w"], kvs[p+"h/"+w], kvs[p+"q/"+r]
	if g == nil || wr == nil || h == nil || q == nil {
		t.Fatalf("keys %v; want g, w, h/<writer>, q/<reader>", kvs)
	}
	if g.lease != 0 || wr.lease != 0 {
		t.Errorf("guard lease %x, writer key lease %x; want none", g.lease, wr.lease)
	}
	if h.lease == 0 || q.lease == 0 || h.lease == q.lease {
		t.Errorf("holder lease %x, place lease %x; want two leases", h.lease, q.lease)
	}
	if fence.Token(h.create) != wp.Token || fence.Token(wr.mod) != wp.Token {
		t.Errorf("holder created at %d, writer key written at %d; want both %d", h.create, wr.mod, wp.Token)
	}
	// The kinds' stored codes (1 semaphore, 2 read, 3 write) are the
	// adapter's own, not driver.Kind's values, and never change: keys
	// written by an earlier release must read the same.
	if g.value != "3 0" || q.value != "2" || h.value != "3 "+strings.Repeat("0", 19) {
		t.Errorf("guard %q, place %q, holder %q; want \"3 0\", \"2\" and \"3 \" and 19 zeros", g.value, q.value, h.value)
	}
}

// lossyClient is a real client that, when armed with n, commits the n-th
// Txn from then on and then reports it failed, as when the reply is lost on
// the way back.
type lossyClient struct {
	fenceetcd.Client
	mu   sync.Mutex
	left int // Txns still to go before the lossy one; 0: not armed
}

var errLostReply = errors.New("the reply was lost")

func (c *lossyClient) arm(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left = n
}

func (c *lossyClient) Txn(ctx context.Context) clientv3.Txn {
	return &lossyTxn{Txn: c.Client.Txn(ctx), c: c}
}

type lossyTxn struct {
	clientv3.Txn
	c *lossyClient
}

func (t *lossyTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *lossyTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *lossyTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.c.left > 0 {
		t.c.left--
		if t.c.left == 0 && err == nil {
			return nil, errLostReply
		}
	}
	return resp, err
}

// TestPermitLostReplies: an acquirePermit whose granting Txn landed but
// whose reply was lost, retried by its owner, gets the same token (it
// never mints a second permit or refuses its own caller); one whose
// queueing Txn's reply was lost, retried, keeps one place in line.
func TestPermitLostReplies(t *testing.T) {
	fc := &lossyClient{Client: sharedClient(t)}
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	a, w := testkit.Owner(t), testkit.Owner(t)

	fc.arm(2) // the read, then the grant
	if _, err := acquirePermit(ctx, b, "sem", a, sem(1, 0)); !errors.Is(err, errLostReply) {
		t.Fatalf("acquirePermit with its grant's reply lost: %v; want the loss", err)
	}
	ps, err := inspectPermits(ctx, b, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Holders) != 1 || ps.Holders[0].Owner != a {
		t.Fatalf("after the lost reply: holders %+v; want owner a alone", ps.Holders)
	}
	p, err := acquirePermit(ctx, b, "sem", a, sem(1, 0))
	if err != nil {
		t.Fatalf("acquirePermit retried after the lost reply: %v; want the same permit", err)
	}
	if p.Token != ps.Holders[0].Token {
		t.Fatalf("retried acquirePermit: token %d; the permit has %d", p.Token, ps.Holders[0].Token)
	}

	fc.arm(2) // the read, then the Txn that makes the place
	if _, err := acquirePermit(ctx, b, "sem", w, sem(1, permitPlace)); !errors.Is(err, errLostReply) {
		t.Fatalf("acquirePermit with its queueing reply lost: %v; want the loss", err)
	}
	if _, err := acquirePermit(ctx, b, "sem", w, sem(1, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("queueing retried: %v; want ErrHeld", err)
	}
	if ps, err = inspectPermits(ctx, b, "sem"); err != nil {
		t.Fatal(err)
	}
	if ps.Waiting != 1 {
		t.Fatalf("one waiter whose queueing reply was lost, retried: %d places; want 1", ps.Waiting)
	}
	if err := releasePermit(ctx, b, "sem", a); err != nil {
		t.Fatal(err)
	}
	wp, err := awaitGrant(ctx, b, "sem", w, sem(1, permitPlace))
	if err != nil {
		t.Fatalf("the waiter after the release: %v", err)
	}
	if wp.Token <= p.Token {
		t.Fatalf("waiter's token %d is not above %d", wp.Token, p.Token)
	}
}
