package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// methods counts the unary calls a client sends, by the method's last
// part ("Txn", "LeaseGrant", ...).
type methods struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *methods) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	m.mu.Lock()
	m.n[method[strings.LastIndexByte(method, '/')+1:]]++
	m.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// take returns the LeaseGrants and Txns counted since the last take: the
// calls that an acquire makes before it returns (the revocations of unused
// leases go out in the background, at moments no test controls).
func (m *methods) take() (grants, txns int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	grants, txns = m.n["LeaseGrant"], m.n["Txn"]
	clear(m.n)
	return grants, txns
}

// notAtomic is a Backend that answers driver.ErrNotAtomic for every set,
// sending nothing, so that the Client takes the names one by one.
type notAtomic struct{ driver.Backend }

func (n notAtomic) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, driver.ErrNotAtomic
	}
	return n.Backend.Acquire(ctx, req)
}

// TestAcquireMultiRoundTrips counts what an Acquire of a set sends: a
// LeaseGrant per name (concurrently) and one Txn for a free set or a
// refused one; one Txn more when owner holds some of the names; the
// Client's in-order path a LeaseGrant and a Txn per name.
func TestAcquireMultiRoundTrips(t *testing.T) {
	m := &methods{n: map[string]int{}}
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   etcdtest.Endpoints(t),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(m.unary)},
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	names := []string{"a", "b", "c", "d", "e"}
	o, x := testkit.Owner(t), testkit.Owner(t)+"x"
	const ttl = 10 * time.Second
	want := func(what string, grants, txns int) {
		t.Helper()
		g, n := m.take()
		if g != grants || n != txns {
			t.Errorf("%s sent %d LeaseGrants and %d Txns; want %d and %d", what, g, n, grants, txns)
		}
	}

	m.take()
	if _, err := acquireSet(ctx, b, names, o, ttl, ""); err != nil {
		t.Fatal(err)
	}
	want("Acquire of a free set", len(names), 1)
	if _, err := acquireSet(ctx, b, names, o, ttl, ""); err != nil {
		t.Fatal(err)
	}
	want("Acquire of a set owner holds", len(names), 2)
	for _, n := range names {
		if err := release(ctx, b, n, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acquire(ctx, b, "c", x, ttl); err != nil {
		t.Fatal(err)
	}
	m.take()
	if _, err := acquireSet(ctx, b, names, o, ttl, ""); !errorsIsHeld(err, "c") {
		t.Fatalf("Acquire of a set with c held: %v; want a *driver.HeldError naming c", err)
	}
	want("Acquire of a set refused", len(names), 1)
	if err := release(ctx, b, "c", x); err != nil {
		t.Fatal(err)
	}
	m.take()
	set, err := lock.New(notAtomic{b}, nil).TryAcquireMulti(ctx, names, ttl)
	if err != nil {
		t.Fatal(err)
	}
	want("TryAcquireMulti in order", len(names), len(names))
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d names: a set %d LeaseGrants (concurrent) + 1 Txn (2 when owner holds some); in order %d + %d", len(names), len(names), len(names), len(names))
}

func errorsIsHeld(err error, name string) bool {
	var held *driver.HeldError
	return errors.As(err, &held) && held.Name == name
}

// TestAcquireMultiChangesNothingWhenBusy: a set with one name held by
// another owner is refused with a *driver.HeldError naming it, and every key
// under the test's prefix is as it was (same value, create and mod
// revision, lease): the names owner held keep their lease, the free ones
// stay absent. A set that mixes a name owner holds with free ones keeps the
// held one's token and gives the others the Txn's revision, above the
// cluster's revision before; the lease the held name leaves is revoked.
func TestAcquireMultiChangesNothingWhenBusy(t *testing.T) {
	cl := sharedClient(t)
	ctx := testkit.Context(t)
	ns := prefix(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	o, x := testkit.Owner(t), testkit.Owner(t)+"x"
	const ttl = 10 * time.Second
	snapshot := func() []string {
		t.Helper()
		resp, err := cl.Get(ctx, ns, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var kvs []string
		for _, kv := range resp.Kvs {
			kvs = append(kvs, fmt.Sprintf("%s=%s c%d m%d l%x", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Lease))
		}
		return kvs
	}

	ta, err := acquire(ctx, b, "a", o, ttl)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := acquire(ctx, b, "c", x, ttl)
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot()
	_, err = acquireSet(ctx, b, []string{"b", "a", "c", "d"}, o, ttl, "set")
	if !errorsIsHeld(err, "c") {
		t.Fatalf("Acquire of a set with c held by another owner: %v; want a *driver.HeldError naming c", err)
	}
	if after := snapshot(); !slices.Equal(before, after) {
		t.Fatalf("a refused Acquire of a set changed keys:\nbefore %v\nafter  %v", before, after)
	}
	info, err := inspect(ctx, b, "c")
	if err != nil || info.Owner != x || info.Token != tc {
		t.Fatalf("Inspect(c) = %+v, %v; want held by its owner with token %d", info, err, tc)
	}

	if err := release(ctx, b, "c", x); err != nil {
		t.Fatal(err)
	}
	head, err := cl.Get(ctx, ns+"nothing")
	if err != nil {
		t.Fatal(err)
	}
	oldLease := leaseOf(ctx, t, cl, b.LockKey("a"))
	tokens, err := acquireSet(ctx, b, []string{"b", "a", "c", "d"}, o, ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if tokens[1] != ta {
		t.Errorf("token of a, which owner held: %d; want %d", tokens[1], ta)
	}
	for _, i := range []int{0, 2, 3} {
		if tokens[i] <= fence.Token(head.Header.Revision) || tokens[i] != tokens[0] {
			t.Errorf("tokens %v: the new ones must be the Txn's revision, above %d", tokens, head.Header.Revision)
		}
	}
	for i, n := range []string{"b", "a", "c", "d"} {
		info, err := inspect(ctx, b, n)
		if err != nil || !info.Held || info.Owner != o || info.Token != tokens[i] {
			t.Errorf("Inspect(%s) = %+v, %v; want owner's with token %d", n, info, err, tokens[i])
		}
	}
	if l := leaseOf(ctx, t, cl, b.LockKey("a")); l == oldLease {
		t.Errorf("a is still on its old lease %x", l)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ttl, err := cl.TimeToLive(ctx, oldLease)
		if err != nil || ttl.TTL < 0 {
			break // revoked
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's old lease %x was not revoked", oldLease)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		if err := release(ctx, b, n, o); err != nil {
			t.Fatal(err)
		}
	}
}

func leaseOf(ctx context.Context, t *testing.T, cl *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := cl.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get(%s) = %v, %v", key, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestAcquireMultiMostNames: the largest set driver.Validate allows, two
// operations per name, fits etcd's default limit on operations in one Txn.
func TestAcquireMultiMostNames(t *testing.T) {
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(sharedClient(t), &fenceetcd.BackendOptions{Prefix: prefix(t)})
	names := make([]string, driver.MaxNames)
	for i := range names {
		names[i] = fmt.Sprintf("n%02d", i)
	}
	o := testkit.Owner(t)
	tokens, err := acquireSet(ctx, b, names, o, 10*time.Second, "md")
	if err != nil {
		t.Fatalf("Acquire of a set of %d names: %v", len(names), err)
	}
	if len(tokens) != len(names) {
		t.Fatalf("%d tokens for %d names", len(tokens), len(names))
	}
	for _, n := range names {
		if err := release(ctx, b, n, o); err != nil {
			t.Fatal(err)
		}
	}
}

// opLimit is a client of the shared cluster whose Txns fail as a server
// with --max-txn-ops=limit refuses them: before anything is applied.
type opLimit struct {
	*clientv3.Client
	limit int
}

func (c opLimit) Txn(ctx context.Context) clientv3.Txn {
	return &limitedTxn{Txn: c.Client.Txn(ctx), limit: c.limit}
}

type limitedTxn struct {
	clientv3.Txn
	limit, ops int
}

func (t *limitedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.ops = max(t.ops, len(cs))
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *limitedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.ops = max(t.ops, len(ops))
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *limitedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.ops = max(t.ops, len(ops))
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *limitedTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.ops > t.limit {
		return nil, rpctypes.ErrTooManyOps
	}
	return t.Txn.Commit()
}

// TestAcquireMultiTooManyOps: on a server whose limit on operations in a
// Txn is below what a set needs, an Acquire of the set writes nothing and
// answers driver.ErrNotAtomic, and the Client takes the names in order
// instead.
func TestAcquireMultiTooManyOps(t *testing.T) {
	ctx := testkit.Context(t)
	ns := prefix(t)
	cl := sharedClient(t)
	b := fenceetcd.NewBackend(opLimit{Client: cl, limit: 4}, &fenceetcd.BackendOptions{Prefix: ns})
	names := []string{"a", "b", "c"}
	o := testkit.Owner(t)
	if _, err := acquireSet(ctx, b, names, o, 10*time.Second, ""); !errors.Is(err, driver.ErrNotAtomic) {
		t.Fatalf("Acquire of a set of %d names with a limit of 4 operations: %v; want driver.ErrNotAtomic", len(names), err)
	}
	resp, err := cl.Get(ctx, ns, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys under the prefix after ErrNotAtomic: %v, %v; want none", resp, err)
	}
	set, err := lock.New(b, nil).TryAcquireMulti(ctx, names, 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquireMulti after ErrNotAtomic (in order): %v", err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
