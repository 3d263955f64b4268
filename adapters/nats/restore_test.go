package nats_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// restoreBump is the N of the runbook's bump: far above the messages the
// test writes after its backup.
const restoreBump = 1_000_000

// TestRestoreRunbook runs the NATS restore runbook of docs/operations.md
// ("After a restore") on a single server of its own, with the leases and
// the fenced store in buckets of their own: back up the server's store
// directory (the server stopped cleanly), issue tokens, restore the
// directory, and take locks again.
//
// Restored as it is, the bucket hands out a token already issued after
// the backup: the failure the runbook prevents. After Backend.Bump (which
// fencectl's bump runs), every token is above every token issued before
// the restore, the lease the restored bucket held is gone (its holder's
// renewal fails), and the store bucket keeps its values and fences.
func TestRestoreRunbook(t *testing.T) {
	dir := t.TempDir()
	c, err := natstest.Start(dir, natstest.Config{Nodes: 1, SyncAlways: true})
	if err != nil {
		testkit.Unavailable(t, "nats-server", err.Error())
	}
	t.Cleanup(c.Close)
	node := c.Nodes[0]
	storeDir := filepath.Join(dir, node.Name) // natstest's store_dir
	ctx := testkit.Context(t)
	_, js := natstest.Connect(t, c.URLs())
	leases, stored := natstest.Bucket(t, js, 1), natstest.Bucket(t, js, 1)
	b := direct{newBackend(t, js, leases)}
	s := newStore(t, js, stored)

	before := takeAndWrite(ctx, t, b, s, "a", "b")

	backup := filepath.Join(t.TempDir(), "backup")
	node.Stop()
	copyDir(t, storeDir, backup)
	restartNode(t, c, js, leases)

	after := takeAndWrite(ctx, t, b, s, "a", "b", "c", "a", "b", "c")
	highest := after[len(after)-1]
	issued := map[fence.Token]bool{}
	for _, tok := range after {
		issued[tok] = true
	}

	node.Stop()
	if err := os.RemoveAll(storeDir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, storeDir)
	restartNode(t, c, js, leases)

	// Restored as it is, the stream's sequence is back at the backup's:
	// the next tokens run through the sequences issued after the backup,
	// and one of them is a token issued again. (Each acquire of a free
	// lock is one message; sequences the server spends on markers may
	// come in between, so the test takes locks until it passes highest.)
	first := acquireWhenServing(t, b, "a", "restored-holder")
	if first > highest {
		t.Fatalf("token after a plain restore = %d; want one at or below %d (the restore rewinds the sequence)", first, highest)
	}
	reissued := issued[first]
	for i := 0; !reissued && i < 2*len(after)+10; i++ {
		tok, err := b.Acquire(ctx, fmt.Sprintf("plain/%d", i), "restored-holder", 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire after a plain restore: %v", err)
		}
		reissued = issued[tok]
		if tok > highest {
			break
		}
	}
	if !reissued {
		t.Fatalf("after a plain restore no token issued after the backup %v was issued again; want one (the failure the bump prevents)", after)
	}

	res, err := b.Bump(ctx, restoreBump)
	if err != nil {
		t.Fatalf("Bump: %v", err)
	}
	if res.LastSeq <= highest || res.Removed == 0 {
		t.Fatalf("Bump = %+v; want LastSeq above %d and the restored records removed", res, highest)
	}
	// The lease the bump removed is gone for its holder.
	if err := b.Extend(ctx, "a", "restored-holder", 10*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of a lease taken before the bump: %v; want lock.ErrNotHeld", err)
	}
	// The store bucket was not touched: it holds what the backup held.
	if rec, err := s.Get(ctx, "b"); err != nil || rec.Fence != before[1] {
		t.Fatalf("store key b after the bump = %+v, %v; want the backup's record, fence %d", rec, err, before[1])
	}
	for _, tok := range takeAndWrite(ctx, t, b, s, "a", "b", "c", "d") {
		if tok <= highest || tok <= res.LastSeq {
			t.Fatalf("token %d after the bump: want above %d (the highest issued before) and %d (LastSeq)", tok, highest, res.LastSeq)
		}
	}
}

// TestBumpRefusals: Backend.Bump changes nothing and says why when the
// bucket also holds a Store's records (ErrBumpNotLeasesOnly), and when by
// is not positive or would pass fence.MaxToken (fence.ErrInvalid).
func TestBumpRefusals(t *testing.T) {
	c := natstest.Single(t)
	_, js := natstest.Connect(t, c.URLs())
	ctx := testkit.Context(t)
	bucket := natstest.Bucket(t, js, 1)
	b := direct{newBackend(t, js, bucket)}
	s := newStore(t, js, bucket)
	tok := takeAndWrite(ctx, t, b, s, "a")[0]

	if _, err := b.Bump(ctx, 1000); !errors.Is(err, fencenats.ErrBumpNotLeasesOnly) {
		t.Fatalf("Bump with a Store in the bucket: %v; want ErrBumpNotLeasesOnly", err)
	}
	for _, by := range []int64{0, -1} {
		if _, err := b.Bump(ctx, by); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("Bump(%d): %v; want fence.ErrInvalid", by, err)
		}
	}
	rec, err := s.Get(ctx, "a")
	if err != nil || rec.Fence != tok {
		t.Fatalf("Get after the refused bumps = %+v, %v; want the record with fence %d", rec, err, tok)
	}

	// A bucket of leases alone may be bumped, and only then.
	leases := natstest.Bucket(t, js, 1)
	lb := direct{newBackend(t, js, leases)}
	takeAndWrite(ctx, t, lb, s, "b")
	first, err := lb.Bump(ctx, 10)
	if err != nil {
		t.Fatalf("Bump of a bucket of leases: %v", err)
	}
	if _, err := lb.Bump(ctx, int64(fence.MaxToken-first.LastSeq)); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Bump past MaxToken: %v; want fence.ErrInvalid (the next token would pass MaxToken)", err)
	}
	res, err := lb.Bump(ctx, int64(fence.MaxToken-first.LastSeq)-1)
	if err != nil || res.LastSeq != fence.MaxToken-1 {
		t.Fatalf("Bump to just below MaxToken = %+v, %v; want LastSeq %d", res, err, fence.MaxToken-1)
	}
	if tok, err := lb.Acquire(ctx, "b", testkit.Owner(t), 10*time.Second); err != nil || tok != fence.MaxToken {
		t.Fatalf("Acquire after a bump to MaxToken-1 = %d, %v; want token %d", tok, err, fence.MaxToken)
	}
}

// takeAndWrite takes each lock in names in turn, writes the store key of
// the same name with the token, releases it, and returns the tokens.
func takeAndWrite(ctx context.Context, t *testing.T, b direct, s *fencenats.Store, names ...string) []fence.Token {
	t.Helper()
	var toks []fence.Token
	for _, name := range names {
		o := testkit.Owner(t)
		tok, err := b.Acquire(ctx, name, o, 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire(%q): %v", name, err)
		}
		if err := s.Put(ctx, name, tok, []byte(o)); err != nil {
			t.Fatalf("Put(%q, %d): %v", name, tok, err)
		}
		if err := b.Release(ctx, name, o); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
		toks = append(toks, tok)
	}
	return toks
}

// restartNode starts the cluster's stopped node and waits until it serves
// bucket to js's connection.
func restartNode(t *testing.T, c *natstest.Cluster, js jetstream.JetStream, bucket string) {
	t.Helper()
	if err := c.Nodes[0].Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.KeyValue(ctx, bucket)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bucket %s after the restart: %v", bucket, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// acquireWhenServing takes name for owner once the restarted server
// serves the bucket again, and returns the token.
func acquireWhenServing(t *testing.T, b direct, name, owner string) fence.Token {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tok, err := b.Acquire(ctx, name, owner, 10*time.Second)
		cancel()
		if err == nil {
			return tok
		}
		if !driver.Retryable(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Fatalf("Acquire(%q) after the restart: %v", name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%q) after the restart: still failing: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// copyDir copies the directory tree src to dst, which must not exist.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// TestBumpReplicated: on a bucket replicated to three servers, the purge
// that Bump makes is replicated like any write: the next token, issued by
// whichever server leads the stream, is above the bumped sequence.
func TestBumpReplicated(t *testing.T) {
	c := natstest.Triple(t)
	_, js := natstest.Connect(t, c.URLs())
	ctx := testkit.Context(t)
	b := direct{newBackend(t, js, natstest.Bucket(t, js, 3))}
	s := newStore(t, js, natstest.Bucket(t, js, 3))
	before := takeAndWrite(ctx, t, b, s, "a", "b")
	res, err := b.Bump(ctx, restoreBump)
	if err != nil {
		t.Fatalf("Bump: %v", err)
	}
	if want := before[1] + restoreBump; res.LastSeq < want {
		t.Fatalf("Bump = %+v; want LastSeq at least %d", res, want)
	}
	for _, tok := range takeAndWrite(ctx, t, b, s, "a", "b") {
		if tok <= res.LastSeq {
			t.Fatalf("token %d after the bump: want above %d", tok, res.LastSeq)
		}
	}
}
