package etcd_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// counter counts the requests a client sends: every unary call (each retry
// included) and every message sent on a stream (a KeepAliveOnce is one).
// Each is one round trip to the cluster.
type counter struct{ n, unaries atomic.Int64 }

func (c *counter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.n.Add(1)
	c.unaries.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *counter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, c: c}, nil
}

type countedStream struct {
	grpc.ClientStream
	c *counter
}

func (s *countedStream) SendMsg(m any) error {
	s.c.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

// countingClient returns a client of the shared cluster whose round trips c
// counts.
func countingClient(tb testing.TB) (*clientv3.Client, *counter) {
	tb.Helper()
	c := &counter{}
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   etcdtest.Endpoints(tb),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(c.unary),
			grpc.WithChainStreamInterceptor(c.stream),
		},
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { _ = cl.Close() })
	return cl, c
}

// trips runs op and returns the round trips it took.
func (c *counter) trips(tb testing.TB, what string, op func() error) int64 {
	tb.Helper()
	before := c.n.Load()
	if err := op(); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	return c.n.Load() - before
}

// unaryTrips is trips counting unary calls only: a session's KeepAlive
// stream sends in the background, at moments no test controls.
func (c *counter) unaryTrips(tb testing.TB, what string, op func() error) int64 {
	tb.Helper()
	before := c.unaries.Load()
	if err := op(); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	return c.unaries.Load() - before
}

// TestRoundTrips backs the round trips the doc comments promise: Acquire 2
// (LeaseGrant, Txn), Release 1 (Txn), Extend 2 (Get, KeepAlive) at an
// unchanged TTL, Inspect 2 (Txn, LeaseTimeToLive), and one Txn for each
// Store call. It also counts etcd's own concurrency.Mutex for comparison:
// Lock and Unlock cost 2 on a session made beforehand, and 4 unary calls
// when each lock gets a session of its own (LeaseGrant, Lock's Txn,
// Unlock's Delete, Close's LeaseRevoke; plus the session's first KeepAlive,
// sent in the background), which is what a per-lock TTL costs with it. The
// fenced acquire and release, 3, sit between the two.
func TestRoundTrips(t *testing.T) {
	cl, c := countingClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	s := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns})
	o := testkit.Owner(t)
	const ttl = 10 * time.Second

	want := func(what string, want int64, op func() error) {
		t.Helper()
		if got := c.trips(t, what, op); got != want {
			t.Errorf("%s took %d round trips; want %d", what, got, want)
		}
	}
	want("Acquire", 2, func() error { _, err := acquire(ctx, b, "l", o, ttl); return err })
	want("Extend to the same TTL", 2, func() error { return extend(ctx, b, "l", o, ttl) })
	want("Inspect", 2, func() error { _, err := inspect(ctx, b, "l"); return err })
	want("Release", 1, func() error { return release(ctx, b, "l", o) })
	want("Store.Put", 1, func() error { return s.Put(ctx, "k", 5, []byte("v")) })
	want("Store.Get", 1, func() error { _, err := s.Get(ctx, "k"); return err })
	want("Store.Advance", 1, func() error { return s.Advance(ctx, "k", 6) })
	want("Store.Delete", 1, func() error { return s.Delete(ctx, "k", 6) })

	client := lock.New(b, nil)
	fenced := c.trips(t, "fenced acquire and release", func() error {
		l, err := client.TryAcquire(ctx, "job", ttl)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	})
	sess, err := concurrency.NewSession(cl, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// Unary calls only, for the same reason as below: the new session's
	// first KeepAlive goes out in the background.
	shared := c.unaryTrips(t, "Mutex on a shared session", func() error { return mutexCycle(ctx, sess, ns+"m") })
	perLock := c.unaryTrips(t, "Mutex with a session of its own", func() error { return sessionMutexCycle(ctx, cl, ns+"m") })
	t.Logf("round trips per acquire+release: fenced %d, concurrency.Mutex %d on a shared session, %d (+1 KeepAlive) with a session per lock", fenced, shared, perLock)
	if shared != 2 || perLock != 4 {
		t.Errorf("concurrency.Mutex took %d round trips on a shared session and %d with a session per lock; the comparison in docs/etcd.md says 2 and 4", shared, perLock)
	}
	if fenced != 3 {
		t.Errorf("fenced acquire and release took %d round trips; want 3", fenced)
	}
	if fenced > perLock {
		t.Errorf("fenced acquire and release took %d round trips, more than the %d of a Mutex with a session per lock", fenced, perLock)
	}
}

func mutexCycle(ctx context.Context, s *concurrency.Session, key string) error {
	m := concurrency.NewMutex(s, key)
	if err := m.Lock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

func sessionMutexCycle(ctx context.Context, cl *clientv3.Client, key string) error {
	s, err := concurrency.NewSession(cl, concurrency.WithTTL(10), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	if err := mutexCycle(ctx, s, key); err != nil {
		_ = s.Close()
		return err
	}
	return s.Close()
}
