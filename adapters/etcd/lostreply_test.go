package etcd_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// The lost replies of the driver's fault kit that the proxy cannot cause
// reliably on gRPC (see backendFaultChecks), caused at the client: the
// Txn that takes effect lands, and its caller is told it failed.

// TestAcquireLostReply: an Acquire whose Txn took the lock but whose reply
// was lost, retried by its owner, gets the token the Txn minted (it never
// locks its own caller out).
func TestAcquireLostReply(t *testing.T) {
	fc := &lossyClient{Client: sharedClient(t)}
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	a := testkit.Owner(t)
	const ttl = 10 * time.Second
	fc.arm(1) // the Txn (its LeaseGrant is no Txn)
	if _, err := acquire(ctx, b, "l", a, ttl); !errors.Is(err, errLostReply) {
		t.Fatalf("Acquire with its reply lost: %v; want the loss", err)
	}
	info, err := inspect(ctx, b, "l")
	if err != nil || info.Owner != a {
		t.Fatalf("after the lost reply: Inspect = %+v, %v; want held by its owner", info, err)
	}
	got, err := acquire(ctx, b, "l", a, ttl)
	if err != nil || got != info.Token {
		t.Fatalf("Acquire retried after the lost reply: %d, %v; want token %d", got, err, info.Token)
	}
}

// TestResumeLostReply: a resume whose Txn landed but whose reply was lost,
// retried by its owner, gets the lease's token again; the lease stays its
// owner's throughout.
func TestResumeLostReply(t *testing.T) {
	fc := &lossyClient{Client: sharedClient(t)}
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	a := testkit.Owner(t)
	const ttl = 10 * time.Second
	tok, err := acquire(ctx, b, "l", a, ttl)
	if err != nil {
		t.Fatal(err)
	}
	fc.arm(1) // the resume's Txn (its LeaseGrant is no Txn)
	if _, err := resume(ctx, b, "l", a, ttl); !errors.Is(err, errLostReply) {
		t.Fatalf("resume with its reply lost: %v; want the loss", err)
	}
	if info, err := inspect(ctx, b, "l"); err != nil || info.Owner != a || info.Token != tok {
		t.Fatalf("after the lost reply: Inspect = %+v, %v; want held by its owner with token %d", info, err, tok)
	}
	got, err := resume(ctx, b, "l", a, ttl)
	if err != nil || got != tok {
		t.Fatalf("resume retried after the lost reply: %d, %v; want token %d", got, err, tok)
	}
}

// TestSetLostReply: an Acquire of a set whose Txn landed but whose reply
// was lost, retried by its owner, gets the tokens the Txn minted, each
// name held by the owner throughout.
func TestSetLostReply(t *testing.T) {
	fc := &lossyClient{Client: sharedClient(t)}
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	o := testkit.Owner(t)
	names := []string{"b", "a", "c"}
	const ttl = 10 * time.Second
	fc.arm(1) // the set's first Txn, which takes every name
	if _, err := acquireSet(ctx, b, names, o, ttl, ""); !errors.Is(err, errLostReply) {
		t.Fatalf("Acquire of a set with its reply lost: %v; want the loss", err)
	}
	landed := make([]fence.Token, len(names))
	for i, n := range names {
		info, err := inspect(ctx, b, n)
		if err != nil || info.Owner != o {
			t.Fatalf("after the lost reply: Inspect(%s) = %+v, %v; want held by the set's owner", n, info, err)
		}
		landed[i] = info.Token
	}
	tokens, err := acquireSet(ctx, b, names, o, ttl, "")
	if err != nil {
		t.Fatalf("Acquire of the set retried after the lost reply: %v; want the same leases", err)
	}
	if !slices.Equal(tokens, landed) {
		t.Fatalf("retried Acquire of the set: tokens %v; the Txn that landed minted %v", tokens, landed)
	}
}
