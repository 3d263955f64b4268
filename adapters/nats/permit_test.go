package nats_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestPermitReleaseWakesWaiter: a release hands the permit to the waiter
// it lets in at once, not at the waiter's next renewal of its place. The
// waiters' place TTL is 9 s, so they renew every 3 s; each is served
// within a second of the release that lets it in. The holders and the
// waiters are on Backends of their own, on connections of their own (two
// processes, as far as NATS can tell).
func TestPermitReleaseWakesWaiter(t *testing.T) {
	const (
		placeTTL = 9 * time.Second
		served   = time.Second
		ttl      = 30 * time.Second
	)
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.cluster(t)
			_, hjs := natstest.Connect(t, c.URLs())
			_, wjs := natstest.Connect(t, c.URLs())
			bucket := natstest.Bucket(t, hjs, top.replicas)
			prefix := testkit.Namespace(t)
			holders := lock.New(onPrefix(t, hjs, bucket, prefix), nil)
			wb := onPrefix(t, wjs, bucket, prefix)
			ctx := testkit.Context(t)

			// wait starts acquire on a Client of the waiters' Backend and
			// returns once its first attempt was refused (it is in line).
			wait := func(acquire func(context.Context, *lock.Client) (*lock.Lease, error)) (got chan *lock.Lease, queuedAt time.Time) {
				queued := make(chan time.Time, 1)
				var once sync.Once
				wc := lock.New(wb, &lock.Options{
					Queue: lock.QueueOptions{PlaceTTL: placeTTL},
					Observer: &lock.Observer{Retrying: func(lock.Event) {
						once.Do(func() { queued <- time.Now() })
					}},
				})
				got = make(chan *lock.Lease, 1)
				go func() {
					l, err := acquire(ctx, wc)
					if err != nil {
						t.Errorf("the waiter's acquire: %v", err)
					}
					got <- l
				}()
				select {
				case at := <-queued:
					return got, at
				case <-time.After(5 * time.Second):
					t.Fatal("the waiter was not refused (in line) within 5 s")
				}
				return nil, time.Time{}
			}
			// release releases l once the waiter has been waiting a moment
			// (its Await listening), and reports how long the waiter
			// then took to get its permit.
			release := func(l *lock.Lease, got chan *lock.Lease, queuedAt time.Time, what string) *lock.Lease {
				t.Helper()
				time.Sleep(300 * time.Millisecond)
				at := time.Now()
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				var w *lock.Lease
				select {
				case w = <-got:
				case <-time.After(placeTTL):
					t.Fatalf("%s: not served within the place TTL of the release", what)
				}
				took, since := time.Since(at), time.Since(queuedAt)
				t.Logf("%s: served %v after the release, %v after it queued", what, took.Round(time.Millisecond), since.Round(time.Millisecond))
				if w == nil {
					t.Fatalf("%s: not served", what)
				}
				if took > served || since >= placeTTL/3 {
					t.Fatalf("%s: served %v after the release and %v after it queued; want within %v of the release, before its first renewal (%v)", what, took, since, served, placeTTL/3)
				}
				return w
			}

			t.Run("semaphore", func(t *testing.T) {
				name := "sem"
				sem := holders.Semaphore(name, 1)
				h, err := sem.TryAcquire(ctx, ttl)
				if err != nil {
					t.Fatal(err)
				}
				got, at := wait(func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
					return c.Semaphore(name, 1).Acquire(ctx, ttl)
				})
				w := release(h, got, at, "the waiter of a semaphore of 1")
				if w.Token() <= h.Token() {
					t.Fatalf("the waiter's token %d is not above the holder's %d", w.Token(), h.Token())
				}
				_ = w.Release(ctx)
			})
			t.Run("writer behind readers", func(t *testing.T) {
				name := "rw"
				rw := holders.RWLock(name)
				r1, err := rw.TryAcquireRead(ctx, ttl)
				if err != nil {
					t.Fatal(err)
				}
				r2, err := rw.TryAcquireRead(ctx, ttl)
				if err != nil {
					t.Fatal(err)
				}
				got, at := wait(func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
					return c.RWLock(name).AcquireWrite(ctx, ttl)
				})
				if err := r1.Release(ctx); err != nil {
					t.Fatal(err)
				}
				w := release(r2, got, at, "a writer behind two readers, the second released")
				_ = w.Release(ctx)
			})
		})
	}
}

// TestPermitDeadPlaceAheadExpires: the waiter behind a dead waiter (one
// that queued once and stopped renewing its place) is let in when that
// place has expired, not at its own next renewal: an expiry publishes
// nothing, so its Await ends when the place ahead has certainly expired
// by the Backend's clock sample (placeDue). The dead place lives 1 s, the
// live waiter's 9 s (a renewal every 3 s); the live waiter is on a Backend
// and a connection of its own.
func TestPermitDeadPlaceAheadExpires(t *testing.T) {
	const (
		deadPlace = time.Second
		placeTTL  = 9 * time.Second
		ttl       = 30 * time.Second
	)
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.cluster(t)
			_, hjs := natstest.Connect(t, c.URLs())
			_, wjs := natstest.Connect(t, c.URLs())
			bucket := natstest.Bucket(t, hjs, top.replicas)
			prefix := testkit.Namespace(t)
			hb := direct{onPrefix(t, hjs, bucket, prefix)}
			waiters := lock.New(onPrefix(t, wjs, bucket, prefix), &lock.Options{Queue: lock.QueueOptions{PlaceTTL: placeTTL}})
			ctx := testkit.Context(t)
			h, dead := testkit.Owner(t), testkit.Owner(t)
			if _, err := hb.AcquirePermit(ctx, "sem", h, semaphore(1, ttl, 0)); err != nil {
				t.Fatal(err)
			}
			if _, err := hb.AcquirePermit(ctx, "sem", dead, semaphore(1, ttl, deadPlace)); !errors.Is(err, lock.ErrHeld) {
				t.Fatalf("the dead waiter queueing: %v; want ErrHeld", err)
			}
			queued := time.Now()
			got := make(chan time.Time, 1)
			go func() {
				l, err := waiters.Semaphore("sem", 1).Acquire(ctx, ttl)
				if err != nil {
					t.Errorf("the live waiter's Acquire: %v", err)
				} else {
					_ = l.Release(ctx)
				}
				got <- time.Now()
			}()
			for {
				info, err := hb.InspectPermits(ctx, "sem")
				if err != nil {
					t.Fatal(err)
				}
				if info.Waiting == 2 {
					break
				}
				if time.Since(queued) > 5*time.Second {
					t.Fatalf("the live waiter was not in line within 5 s (%d waiting)", info.Waiting)
				}
				time.Sleep(time.Millisecond)
			}
			if err := hb.ReleasePermit(ctx, "sem", h); err != nil {
				t.Fatal(err)
			}
			at := <-got
			took := at.Sub(queued)
			t.Logf("served %v after the dead waiter queued (its place lives %v; the live waiter renews every %v)", took.Round(time.Millisecond), deadPlace, placeTTL/3)
			if took > deadPlace+time.Second {
				t.Fatalf("served %v after the dead waiter queued; want within %v of its place's expiry, before the live waiter's renewal (%v)", took, time.Second, placeTTL/3)
			}
		})
	}
}

// TestPermitRoundTrips backs docs/nats.md's costs, counted as in
// TestRoundTrips: a grant, a renewal and a kept place are two (the read on
// the leader, the conditional publish), plus a clock sample (sent with the
// read) on a Backend whose sample is stale; a refusal without a place is
// the read; Extend, Release and Leave of a permit whose state the Backend
// wrote last are one publish, and three when another Backend changed it
// since (the refused publish, the read, the publish); an Inspect of the
// permit name is the read (with a fresh clock sample); the first Await in
// a permit name's line reads its state once it has subscribed. (The
// helper's method names are the old per-shape ones, each one driver call.)
func TestPermitRoundTrips(t *testing.T) {
	nc, js := natstest.Connect(t, natstest.Single(t).URLs())
	_, ojs := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	prefix := testkit.Namespace(t)
	b, other := direct{onPrefix(t, js, bucket, prefix)}, direct{onPrefix(t, ojs, bucket, prefix)}
	ctx := testkit.Context(t)
	const ttl, place = 10 * time.Second, 10 * time.Second
	a, w, x := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	want := func(what string, want uint64, op func() error) {
		t.Helper()
		before := requests(nc)
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := requests(nc) - before; got != want {
			t.Errorf("%s took %d round trips; want %d", what, got, want)
		}
	}
	held := func(owner string, req permitReq) func() error {
		return func() error {
			if _, err := b.AcquirePermit(ctx, "s", owner, req); !errors.Is(err, lock.ErrHeld) {
				return fmt.Errorf("%v; want ErrHeld", err)
			}
			return nil
		}
	}
	acquire := func(name, owner string) func() error {
		return func() error {
			_, err := b.AcquirePermit(ctx, name, owner, semaphore(1, ttl, place))
			return err
		}
	}
	want("the first AcquirePermit of a Backend (the read, a clock sample, the grant)", 3, acquire("s", a))
	want("AcquirePermit of another name", 2, acquire("t", a))
	want("AcquirePermit by the holder (a renewal)", 2, acquire("s", a))
	want("AcquirePermit refused without a place", 1, held(w, semaphore(1, ttl, 0)))
	want("AcquirePermit refused with a place (a new place)", 2, held(w, semaphore(1, ttl, place)))
	want("LeavePermitLine of the place the Backend wrote", 1, func() error { return b.LeavePermitLine(ctx, "s", w) })
	want("ExtendPermit of a state the Backend wrote", 1, func() error { return b.ExtendPermit(ctx, "t", a, ttl) })
	want("ReleasePermit of a state the Backend wrote", 1, func() error { return b.ReleasePermit(ctx, "t", a) })
	want("InspectPermits", 1, func() error { _, err := b.InspectPermits(ctx, "s"); return err })

	// Another Backend changes the name: what b remembers is behind.
	if _, err := other.AcquirePermit(ctx, "s", x, semaphore(1, ttl, place)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("another Backend queueing: %v; want ErrHeld", err)
	}
	want("ExtendPermit after another Backend changed the name", 3, func() error { return b.ExtendPermit(ctx, "s", a, ttl) })

	want("AcquirePermit refused with a place (the first AwaitPermit follows)", 2, held(w, semaphore(1, ttl, place)))
	want("the first AwaitPermit of a name (its read once subscribed)", 1, func() error {
		actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := b.AwaitPermit(actx, "s", w, time.Second); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%v; want the context's deadline", err)
		}
		return nil
	})
	want("ReleasePermit of the state the Backend's last AcquirePermit wrote", 1, func() error { return b.ReleasePermit(ctx, "s", a) })
}

// onPrefix is a Backend on js in bucket under prefix.
func onPrefix(t *testing.T, js jetstream.JetStream, bucket, prefix string) *fencenats.Backend {
	t.Helper()
	b, err := fencenats.NewBackend(context.Background(), js, bucket, &fencenats.BackendOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPermitKeyLayout backs docs/nats.md's permit row: a permit name's
// state is the one key "<prefix>.permit.<base64url(name)>", apart from the
// lock of the same name; its last message is JSON with the shape, the
// permits (each with its token, PriorWriter and expiry), the places and
// the last writer, and carries no TTL; the permit a message grants has the
// message's revision as its token.
func TestPermitKeyLayout(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	ctx := testkit.Context(t)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	name := "jobs/x"
	prefix := testkit.Namespace(t)
	b := direct{onPrefix(t, js, bucket, prefix)}
	enc := base64.RawURLEncoding.EncodeToString([]byte(name))
	if got, want := b.PermitKey(name), prefix+".permit."+enc; got != want || b.Key(name) != prefix+".lock."+enc {
		t.Fatalf("PermitKey(%q) = %q; want %q", name, got, want)
	}
	o, r := testkit.Owner(t), testkit.Owner(t)
	wp, err := b.AcquirePermit(ctx, name, o, permitReq{Kind: driver.Write, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquirePermit(ctx, name, r, permitReq{Kind: driver.Read, TTL: time.Minute, Place: time.Minute}); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("a reader beside the writer: %v; want ErrHeld", err)
	}
	e, err := kv.Get(ctx, b.PermitKey(name))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		V       int `json:"v"`
		Shape   int `json:"shape"`
		Holders []struct {
			Owner   string `json:"owner"`
			Kind    int    `json:"kind"`
			Token   int64  `json:"token"`
			Expires int64  `json:"expires"`
		} `json:"holders"`
		Line []struct {
			Owner string `json:"owner"`
			Kind  int    `json:"kind"`
		} `json:"line"`
		Writer int64 `json:"writer"`
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatalf("the state %q: %v", e.Value(), err)
	}
	t.Logf("the state: %s", e.Value())
	// Kinds are stored as the codes the key has always had: 1 semaphore,
	// 2 read, 3 write (not driver.Kind's values).
	if st.V != 1 || st.Shape != 3 || len(st.Holders) != 1 || st.Holders[0].Owner != o || st.Holders[0].Kind != 3 ||
		fence.Token(st.Holders[0].Token) != wp.Token || st.Writer != int64(wp.Token) || len(st.Line) != 1 || st.Line[0].Owner != r ||
		st.Line[0].Kind != 2 {
		t.Fatalf("the state %s; want a read-write lock held by %s with token %d as last writer, and %s in line for a read permit", e.Value(), o, wp.Token, r)
	}
	if left := time.Until(time.Unix(0, st.Holders[0].Expires)); left < 55*time.Second || left > 65*time.Second {
		t.Fatalf("the permit expires in %v; want about its TTL, a minute", left)
	}
	msg, err := natsMsg(ctx, js, bucket, b.PermitKey(name))
	if err != nil {
		t.Fatal(err)
	}
	if v := msg.Header.Get(jetstream.MsgTTLHeader); v != "" {
		t.Fatalf("the state message has TTL %q; want none (its last writer outlives its permits)", v)
	}
	// The lock of the same name is another key, and free.
	if info, err := b.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("Inspect of the lock named as the read-write lock = %+v, %v; want free", info, err)
	}
	// The permit granted by a message has that message's revision.
	if err := b.LeavePermitLine(ctx, name, r); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleasePermit(ctx, name, o); err != nil {
		t.Fatal(err)
	}
	p, err := b.AcquirePermit(ctx, name, r, permitReq{Kind: driver.Read, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e, err = kv.Get(ctx, b.PermitKey(name))
	if err != nil {
		t.Fatal(err)
	}
	if fence.Token(e.Revision()) != p.Token || p.PriorWriter != wp.Token {
		t.Fatalf("a read permit granted at revision %d: token %d, prior writer %d; want %d and %d", e.Revision(), p.Token, p.PriorWriter, e.Revision(), wp.Token)
	}
}

// natsMsg is key's last message in bucket, with its headers.
func natsMsg(ctx context.Context, js jetstream.JetStream, bucket, key string) (*jetstream.RawStreamMsg, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	return s.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+key)
}

// TestPermitTokensAfterKeyRemoved: a permit name's tokens keep rising when
// its key is deleted or purged with the KV API (the next grant writes over
// the marker), and after Backend.Bump, which accepts a bucket of leases and
// permit names and ends every permit: tokens are revisions of the bucket's
// stream, which none of these lowers.
func TestPermitTokensAfterKeyRemoved(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	b := direct{newBackend(t, js, bucket)}
	ctx := testkit.Context(t)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	const name = "sem"
	var last fence.Token
	take := func(what string) string {
		t.Helper()
		o := testkit.Owner(t)
		p, err := b.AcquirePermit(ctx, name, o, semaphore(2, time.Minute, 0))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if p.Token <= last {
			t.Fatalf("%s: token %d, not above %d", what, p.Token, last)
		}
		last = p.Token
		return o
	}
	take("the first permit")
	held := take("a second permit")
	if err := kv.Delete(ctx, b.PermitKey(name)); err != nil {
		t.Fatal(err)
	}
	take("a permit after a KV delete of the key")
	if err := kv.Purge(ctx, b.PermitKey(name)); err != nil {
		t.Fatal(err)
	}
	take("a permit after a KV purge of the key")
	if _, err := b.Acquire(ctx, "a lock", testkit.Owner(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := b.Bump(ctx, 1000)
	if err != nil {
		t.Fatalf("Bump of a bucket of leases and permits: %v", err)
	}
	if err := b.ExtendPermit(ctx, name, held, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("ExtendPermit after the bump: %v; want ErrNotHeld (a bump ends every permit)", err)
	}
	take("a permit after a bump")
	if last <= res.LastSeq {
		t.Fatalf("token %d after the bump; want above %d", last, res.LastSeq)
	}
}

// BenchmarkPermitAcquireRelease: a semaphore permit (of 2, the other held)
// and a write permit taken with one attempt and released, through a
// Client, as BenchmarkFencedAcquireRelease does for a lock: the read, the
// grant and the release (which the Backend's memory of the state makes one
// publish), plus a sample of the leader's clock every 5 s.
func BenchmarkPermitAcquireRelease(b *testing.B) {
	for _, shape := range []string{"semaphore", "write"} {
		b.Run(shape, func(b *testing.B) {
			nc, js, bucket := benchEnv(b)
			client := lock.New(newBackend(b, js, bucket), nil)
			ctx := context.Background()
			take := func() (*lock.Lease, error) { return client.RWLock("bench").TryAcquireWrite(ctx, benchTTL) }
			if shape == "semaphore" {
				sem := client.Semaphore("bench", 2)
				if _, err := sem.TryAcquire(ctx, time.Hour); err != nil {
					b.Fatal(err)
				}
				take = func() (*lock.Lease, error) { return sem.TryAcquire(ctx, benchTTL) }
			}
			before := requests(nc)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l, err := take()
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportRT(b, nc, before)
		})
	}
}
