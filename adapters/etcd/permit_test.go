package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

const permitTTL, permitPlace = 10 * time.Second, 10 * time.Second

func sem(n int, place time.Duration) lock.PermitRequest {
	return lock.PermitRequest{Kind: lock.SemaphorePermit, Limit: n, TTL: permitTTL, Place: place}
}

func rw(kind lock.PermitKind, place time.Duration) lock.PermitRequest {
	return lock.PermitRequest{Kind: kind, TTL: permitTTL, Place: place}
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
func awaitGrant(ctx context.Context, b *fenceetcd.Backend, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		p, err := b.AcquirePermit(ctx, name, owner, req)
		if !errors.Is(err, lock.ErrHeld) {
			return p, err
		}
		if err := b.AwaitPermit(ctx, name, owner, time.Second); err != nil {
			return lock.Permit{}, err
		}
	}
}

// TestPermitSemaphoreNeverOverLimit: 16 contenders on a semaphore of 3,
// each taking a permit three times, queued (AcquirePermit with a place,
// AwaitPermit between attempts). A contender counts itself in after its
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
				if err := b.ReleasePermit(ctx, "sem", o); err != nil {
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
	ps, err := b.InspectPermits(ctx, "sem")
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
	wp, err := b.AcquirePermit(ctx, "rw", w, rw(lock.WritePermit, 0))
	if err != nil {
		t.Fatal(err)
	}
	before := keysUnder(t, cl, b.PermitKey("rw"))
	if _, err := b.AcquirePermit(ctx, "rw", r, rw(lock.ReadPermit, 0)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("reader beside a writer: %v; want ErrHeld", err)
	}
	if after := keysUnder(t, cl, b.PermitKey("rw")); after != before {
		t.Fatalf("a refused reader without a place left %d keys; want %d", after, before)
	}
	if _, err := b.AcquirePermit(ctx, "rw", r, rw(lock.ReadPermit, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("queued reader beside a writer: %v; want ErrHeld", err)
	}
	// The release comes while the reader is not yet in AwaitPermit: its
	// wake-up must not be lost.
	if err := b.ReleasePermit(ctx, "rw", w); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.AwaitPermit(actx, "rw", r, 10*time.Second); err != nil {
		t.Fatalf("AwaitPermit after the writer's release: %v", err)
	}
	if actx.Err() != nil {
		t.Fatal("AwaitPermit returned only at its deadline: the release's wake-up was lost")
	}
	rp, err := b.AcquirePermit(ctx, "rw", r, rw(lock.ReadPermit, permitPlace))
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
	if _, err := b.AcquirePermit(ctx, "rw", r1, rw(lock.ReadPermit, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquirePermit(ctx, "rw", w, rw(lock.WritePermit, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("writer beside a reader: %v; want ErrHeld", err)
	}
	for _, place := range []time.Duration{0, permitPlace} {
		if _, err := b.AcquirePermit(ctx, "rw", r2, rw(lock.ReadPermit, place)); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("new reader (place %v) with a writer waiting: %v; want ErrHeld", place, err)
		}
	}
	if err := b.ReleasePermit(ctx, "rw", r1); err != nil {
		t.Fatal(err)
	}
	// The reader behind the writer is still refused.
	if _, err := b.AcquirePermit(ctx, "rw", r2, rw(lock.ReadPermit, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("reader behind a waiting writer, the lock free: %v; want ErrHeld", err)
	}
	wp, err := awaitGrant(ctx, b, "rw", w, rw(lock.WritePermit, permitPlace))
	if err != nil {
		t.Fatalf("writer after the reader left: %v", err)
	}
	if err := b.ReleasePermit(ctx, "rw", w); err != nil {
		t.Fatal(err)
	}
	rp, err := awaitGrant(ctx, b, "rw", r2, rw(lock.ReadPermit, permitPlace))
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
	for i, req := range []lock.PermitRequest{
		rw(lock.ReadPermit, 0), rw(lock.WritePermit, 0), rw(lock.ReadPermit, 0),
		rw(lock.WritePermit, 0), sem(2, 0), rw(lock.ReadPermit, 0),
	} {
		o := testkit.Owner(t)
		p, err := b.AcquirePermit(ctx, "n", o, req)
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
		if req.Kind == lock.WritePermit {
			lastWriter = p.Token
		}
		if err := b.ReleasePermit(ctx, "n", o); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := b.InspectPermits(ctx, "n")
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
	short := lock.PermitRequest{Kind: lock.SemaphorePermit, Limit: 1, TTL: time.Second}
	ap, err := b.AcquirePermit(ctx, "sem", a, short)
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
	if err := b.ExtendPermit(ctx, "sem", a, permitTTL); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("ExtendPermit of an expired permit: %v; want ErrNotHeld", err)
	}
	ps, err := b.InspectPermits(ctx, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Holders) != 1 || ps.Holders[0].Owner != w {
		t.Fatalf("holders %+v; want only the waiter", ps.Holders)
	}
}

// TestPermitHonoursContext: every method returns the context's error when
// it has ended, and AwaitPermit returns at its context's deadline.
func TestPermitHonoursContext(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	o, w := testkit.Owner(t), testkit.Owner(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	calls := map[string]error{}
	_, calls["AcquirePermit"] = b.AcquirePermit(done, "sem", o, sem(1, permitPlace))
	calls["ExtendPermit"] = b.ExtendPermit(done, "sem", o, permitTTL)
	calls["ReleasePermit"] = b.ReleasePermit(done, "sem", o)
	calls["AwaitPermit"] = b.AwaitPermit(done, "sem", o, time.Second)
	calls["LeavePermitLine"] = b.LeavePermitLine(done, "sem", o)
	_, calls["InspectPermits"] = b.InspectPermits(done, "sem")
	for what, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v; want context.Canceled", what, err)
		}
	}
	if n := keysUnder(t, cl, b.PermitKey("sem")); n != 0 {
		t.Fatalf("%d keys written under a cancelled context", n)
	}
	if _, err := b.AcquirePermit(ctx, "sem", o, sem(1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquirePermit(ctx, "sem", w, sem(1, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("queueing: %v; want ErrHeld", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	if err := b.AwaitPermit(dctx, "sem", w, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitPermit past its deadline: %v; want DeadlineExceeded", err)
	}
	// max passing is not an error.
	if err := b.AwaitPermit(ctx, "sem", w, 100*time.Millisecond); err != nil {
		t.Fatalf("AwaitPermit past max: %v; want nil", err)
	}
}

// TestPermitBadInput: bad arguments are ErrInvalid, and no request is sent.
func TestPermitBadInput(t *testing.T) {
	cl, c := countingClient(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	o := testkit.Owner(t)
	before := c.n.Load()
	bad := map[string]error{}
	for what, req := range map[string]lock.PermitRequest{
		"limit 0":             sem(0, 0),
		"limit too high":      sem(lock.MaxPermits+1, 0),
		"no kind":             {TTL: permitTTL},
		"reader with limit":   {Kind: lock.ReadPermit, Limit: 1, TTL: permitTTL},
		"ttl 0":               {Kind: lock.WritePermit},
		"place below the min": rw(lock.WritePermit, lock.MinPlaceTTL/2),
	} {
		_, bad["AcquirePermit, "+what] = b.AcquirePermit(ctx, "sem", o, req)
	}
	_, bad["AcquirePermit, empty name"] = b.AcquirePermit(ctx, "", o, sem(1, 0))
	_, bad["AcquirePermit, empty owner"] = b.AcquirePermit(ctx, "sem", "", sem(1, 0))
	bad["ExtendPermit, empty owner"] = b.ExtendPermit(ctx, "sem", "", permitTTL)
	bad["ExtendPermit, ttl 0"] = b.ExtendPermit(ctx, "sem", o, 0)
	bad["ReleasePermit, empty name"] = b.ReleasePermit(ctx, "", o)
	bad["AwaitPermit, empty owner"] = b.AwaitPermit(ctx, "sem", "", time.Second)
	bad["LeavePermitLine, empty name"] = b.LeavePermitLine(ctx, "", o)
	_, bad["InspectPermits, empty name"] = b.InspectPermits(ctx, "")
	for what, err := range bad {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", what, err)
		}
	}
	if n := c.n.Load() - before; n != 0 {
		t.Fatalf("bad input sent %d requests; want none", n)
	}
}

// TestPermitRoundTrips backs the costs in docs/etcd.md: a grant is 3
// requests (read Txn, LeaseGrant, Txn), a refusal without a place 1 (the
// read), a new place 3 (read, LeaseGrant, Txn), a place renewed 2 (read,
// KeepAlive), ExtendPermit 2 (Get, KeepAlive), ReleasePermit and
// LeavePermitLine 1 each, InspectPermits 1 and a LeaseTimeToLive per
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
	want("AcquirePermit granted", 3, func() error { _, err := b.AcquirePermit(ctx, "s", h, sem(1, 0)); return err })
	want("AcquirePermit refused without a place", 1, func() error { _, err := b.AcquirePermit(ctx, "s", w, sem(1, 0)); return held(err) })
	want("AcquirePermit making a place", 3, func() error { _, err := b.AcquirePermit(ctx, "s", w, sem(1, permitPlace)); return held(err) })
	want("AcquirePermit renewing a place", 2, func() error { _, err := b.AcquirePermit(ctx, "s", w, sem(1, permitPlace)); return held(err) })
	want("ExtendPermit", 2, func() error { return b.ExtendPermit(ctx, "s", h, permitTTL) })
	want("InspectPermits with one holder", 2, func() error { _, err := b.InspectPermits(ctx, "s"); return err })
	want("LeavePermitLine", 1, func() error { return b.LeavePermitLine(ctx, "s", w) })
	want("ReleasePermit", 1, func() error { return b.ReleasePermit(ctx, "s", h) })
}

// TestPermitKeyLayout backs docs/etcd.md's permit rows: the keys' names
// (escaped), the holder and the place each on an etcd lease of its own, the
// guard and the last-writer key on none, the writer key's mod revision the
// write permit's token, and a permit's token its key's create revision.
func TestPermitKeyLayout(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	if got, want := b.PermitKey("a/b"), ns+"permit/a%2Fb/"; got != want {
		t.Fatalf("PermitKey = %q; want %q", got, want)
	}
	w, r := testkit.Owner(t), testkit.Owner(t)
	wp, err := b.AcquirePermit(ctx, "a/b", w, rw(lock.WritePermit, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquirePermit(ctx, "a/b", r, rw(lock.ReadPermit, permitPlace)); !errors.Is(err, lock.ErrHeld) {
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
	if g.value != fmt.Sprint(int(lock.WritePermit), " 0") || q.value != fmt.Sprint(int(lock.ReadPermit)) {
		t.Errorf("guard %q, place %q", g.value, q.value)
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

// TestPermitLostReplies: an AcquirePermit whose granting Txn landed but
// whose reply was lost, retried by its owner, gets the same token (it
// never mints a second permit or refuses its own caller); one whose
// queueing Txn's reply was lost, retried, keeps one place in line.
func TestPermitLostReplies(t *testing.T) {
	fc := &lossyClient{Client: sharedClient(t)}
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	a, w := testkit.Owner(t), testkit.Owner(t)

	fc.arm(2) // the read, then the grant
	if _, err := b.AcquirePermit(ctx, "sem", a, sem(1, 0)); !errors.Is(err, errLostReply) {
		t.Fatalf("AcquirePermit with its grant's reply lost: %v; want the loss", err)
	}
	ps, err := b.InspectPermits(ctx, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Holders) != 1 || ps.Holders[0].Owner != a {
		t.Fatalf("after the lost reply: holders %+v; want owner a alone", ps.Holders)
	}
	p, err := b.AcquirePermit(ctx, "sem", a, sem(1, 0))
	if err != nil {
		t.Fatalf("AcquirePermit retried after the lost reply: %v; want the same permit", err)
	}
	if p.Token != ps.Holders[0].Token {
		t.Fatalf("retried AcquirePermit: token %d; the permit has %d", p.Token, ps.Holders[0].Token)
	}

	fc.arm(2) // the read, then the Txn that makes the place
	if _, err := b.AcquirePermit(ctx, "sem", w, sem(1, permitPlace)); !errors.Is(err, errLostReply) {
		t.Fatalf("AcquirePermit with its queueing reply lost: %v; want the loss", err)
	}
	if _, err := b.AcquirePermit(ctx, "sem", w, sem(1, permitPlace)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("queueing retried: %v; want ErrHeld", err)
	}
	if ps, err = b.InspectPermits(ctx, "sem"); err != nil {
		t.Fatal(err)
	}
	if ps.Waiting != 1 {
		t.Fatalf("one waiter whose queueing reply was lost, retried: %d places; want 1", ps.Waiting)
	}
	if err := b.ReleasePermit(ctx, "sem", a); err != nil {
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
