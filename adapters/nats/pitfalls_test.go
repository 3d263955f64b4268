package nats_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// lastMsg reads the last message of key in bucket, headers included.
func lastMsg(t *testing.T, js jetstream.JetStream, bucket, key string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(testkit.Context(t), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(testkit.Context(t), "$KV."+bucket+"."+key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return m
}

// waitFree polls Inspect until name is free, failing t after within.
func waitFree(t *testing.T, b direct, name string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		info, err := b.Inspect(testkit.Context(t), name)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if !info.Held {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%q still held %v after the last renewal (%+v): the renewal dropped the TTL", name, within, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestExtendKeepsKeyTTL is the nats.go#1994 pitfall: a KV Update writes a
// message without the Nats-TTL header, so a lock renewed with Update never
// expires. Extend (and a same-owner Acquire) must write the TTL again, and
// the renewed lease must still end on the server.
func TestExtendKeepsKeyTTL(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	b := direct{newBackend(t, js, bucket)}
	ctx := testkit.Context(t)
	owner := testkit.Owner(t)

	// The trap itself, on a plain KV key: Update leaves no TTL behind.
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "plain", []byte("x"), jetstream.KeyTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "plain", []byte("y"), rev); err != nil {
		t.Fatal(err)
	}
	if h := lastMsg(t, js, bucket, "plain").Header.Get(jetstream.MsgTTLHeader); h != "" {
		t.Logf("kv.Update kept the TTL (%q): nats.go#1994 is fixed in this client", h)
	}

	if _, err := b.Acquire(ctx, "renewed", owner, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, renew := range []func() error{
		func() error { return b.Extend(ctx, "renewed", owner, 1500*time.Millisecond) },
		func() error { _, err := b.Acquire(ctx, "renewed", owner, 1500*time.Millisecond); return err },
	} {
		if err := renew(); err != nil {
			t.Fatal(err)
		}
		if h := lastMsg(t, js, bucket, b.Key("renewed")).Header.Get(jetstream.MsgTTLHeader); h != "2s" {
			t.Fatalf("renewal wrote Nats-TTL %q, want \"2s\" (1.5 s rounded up)", h)
		}
	}
	waitFree(t, b, "renewed", 5*time.Second)
}

// TestAcquireAfterDeleteMarker is the nats-server#5162 pitfall: a KV
// Create expects no message on the key, so it fails after a delete marker
// (a release, a plain kv.Delete, the server's marker after an expiry). The
// Backend and the Store must write over every kind of marker.
func TestAcquireAfterDeleteMarker(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	b := direct{newBackend(t, js, bucket)}
	s := newStore(t, js, bucket)
	ctx, cancel := context.WithTimeout(testkit.Context(t), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	a, c := testkit.Owner(t), testkit.Owner(t)

	// A marker left by Release.
	t1, err := b.Acquire(ctx, "m", a, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "m", a); err != nil {
		t.Fatal(err)
	}
	if op := lastMsg(t, js, bucket, b.Key("m")).Header.Get("KV-Operation"); op != "DEL" {
		t.Fatalf("after Release the key's last message has KV-Operation %q, want a delete marker", op)
	}
	t2, err := b.Acquire(ctx, "m", c, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire over a delete marker: %v", err)
	}
	if t2 <= t1 {
		t.Fatalf("token %d after release, want above %d", t2, t1)
	}
	// A marker of a plain KV Delete, without a TTL.
	if err := kv.Delete(ctx, b.Key("m")); err != nil {
		t.Fatal(err)
	}
	t3, err := b.Acquire(ctx, "m", a, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire over a kv.Delete marker: %v", err)
	}
	if t3 <= t2 {
		t.Fatalf("token %d, want above %d", t3, t2)
	}
	// A kv.Create at the same key is what fails here without care.
	if err := kv.Delete(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "plain", []byte("x")); err != nil {
		t.Logf("kv.Create after a delete marker: %v", err)
	}

	// The Store: Delete leaves a marker that keeps the fence; a newer Put
	// writes over it, an older one is refused.
	if err := s.Put(ctx, "k", 5, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k", 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "k", 5, []byte("old")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Put with token 5 over a tombstone of fence 6: %v, want stale", err)
	}
	if err := s.Put(ctx, "k", 7, []byte("new")); err != nil {
		t.Fatalf("Put over a delete marker: %v", err)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil || string(rec.Value) != "new" || rec.Fence != 7 {
		t.Fatalf("Get = %+v, %v; want new at fence 7", rec, err)
	}
}

// TestContendedWritesR3 is the nats-server#7281 pitfall: on a replicated
// bucket the leader refuses a conditional write with "wrong last sequence"
// (code 10164, not 10071) while another write to the subject is in flight.
// Such a refusal wrote nothing, so the Store and the Backend must compare
// again rather than fail: here many writers with equal tokens (all
// acceptable) and many contenders for one lock all get clean answers.
func TestContendedWritesR3(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Triple(t).URLs())
	bucket := natstest.Bucket(t, js, 3)
	s := newStore(t, js, bucket)
	b := direct{newBackend(t, js, bucket)}
	ctx := testkit.Context(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner, _ := lock.NewOwner()
			for i := 0; i < 15; i++ {
				if err := s.Put(ctx, "hot", 1, []byte("v")); err != nil {
					errs <- err
				}
				_, err := b.Acquire(ctx, "hot", owner, 5*time.Second)
				if err == nil {
					err = b.Release(ctx, "hot", owner)
				}
				if err != nil && !errors.Is(err, lock.ErrHeld) {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("contended call: %v", err)
	}
}

// TestNewBackendRefusesWithoutKeyTTL: a bucket that does not allow
// per-message TTLs (created without LimitMarkerTTL) cannot expire a lease
// on the server, so the constructor refuses it with ErrNoKeyTTL rather than
// judge expiry by a client clock. A bucket with a TTL of its own is refused
// by both constructors (ErrBucketConfig), as is one with a size limit that
// discards old messages, and a missing bucket.
func TestNewBackendRefusesWithoutKeyTTL(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	ctx := testkit.Context(t)
	plain := "fk_plain_" + testkit.Namespace(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: plain}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), plain) })
	if _, err := fencenats.NewBackend(ctx, js, plain, nil); !errors.Is(err, fencenats.ErrNoKeyTTL) {
		t.Fatalf("NewBackend on a bucket without per-key TTL: %v, want ErrNoKeyTTL", err)
	}
	if _, err := fencenats.NewStore(ctx, js, plain, nil); err != nil {
		t.Fatalf("NewStore needs no per-key TTL: %v", err)
	}
	aged := "fk_aged_" + testkit.Namespace(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: aged, TTL: time.Hour, LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), aged) })
	if _, err := fencenats.NewBackend(ctx, js, aged, nil); !errors.Is(err, fencenats.ErrBucketConfig) {
		t.Fatalf("NewBackend on a bucket with a TTL: %v, want ErrBucketConfig", err)
	}
	if _, err := fencenats.NewStore(ctx, js, aged, nil); !errors.Is(err, fencenats.ErrBucketConfig) {
		t.Fatalf("NewStore on a bucket with a TTL: %v, want ErrBucketConfig", err)
	}
	// A bucket's stream made by hand with a size limit that discards old
	// messages would drop other keys' leases and fences when full.
	limited := "fk_limited_" + testkit.Namespace(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + limited, Subjects: []string{"$KV." + limited + ".>"},
		MaxMsgs: 100, Discard: jetstream.DiscardOld, MaxMsgsPerSubject: 1, AllowMsgTTL: true,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), "KV_"+limited) })
	if _, err := fencenats.NewBackend(ctx, js, limited, nil); !errors.Is(err, fencenats.ErrBucketConfig) {
		t.Fatalf("NewBackend on a bucket that discards old messages when full: %v, want ErrBucketConfig", err)
	}
	if _, err := fencenats.NewStore(ctx, js, limited, nil); !errors.Is(err, fencenats.ErrBucketConfig) {
		t.Fatalf("NewStore on a bucket that discards old messages when full: %v, want ErrBucketConfig", err)
	}
	if _, err := fencenats.NewStore(ctx, js, "fk_missing_"+testkit.Namespace(t), nil); !errors.Is(err, fencenats.ErrBucketConfig) {
		t.Fatalf("NewStore on a missing bucket: %v, want ErrBucketConfig", err)
	}
	if _, err := fencenats.NewStore(ctx, js, plain, &fencenats.StoreOptions{Prefix: "a b"}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("NewStore with prefix \"a b\": %v, want fence.ErrInvalid", err)
	}
}

// TestNewBackendRefusesOldServer starts the nats-server found in PATH when
// it is older than 2.11 (this machine's is 2.9.10), which has no per-key
// TTL: NewBackend must refuse with ErrNoKeyTTL, and the Store must pass
// its suite. Without such a binary the
// test is skipped; the version rule itself is TestServerHasKeyTTL's.
func TestNewBackendRefusesOldServer(t *testing.T) {
	old, ok := natstest.OldServer(t)
	if !ok {
		t.Skip("no nats-server older than 2.11 in PATH")
	}
	_, js := natstest.Connect(t, []string{old})
	ctx := testkit.Context(t)
	name := "fk_old_" + testkit.Namespace(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name}); err != nil {
		t.Fatal(err)
	}
	_, err := fencenats.NewBackend(ctx, js, name, nil)
	if !errors.Is(err, fencenats.ErrNoKeyTTL) {
		t.Fatalf("NewBackend on %s: %v, want ErrNoKeyTTL", js.Conn().ConnectedServerVersion(), err)
	}
	t.Logf("refused: %v", err)
	// The Store needs no per-key TTL: it passes its suite on the old
	// server too.
	fencetest.Run(t, func(t *testing.T) fence.Store { return newStore(t, js, name) })
}
