package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// restoreBump is the --bump-revision of the runbook's restore: far above
// the writes the test makes after its snapshot.
const restoreBump = 1_000_000

// clusterToken is the initial cluster token of etcdtest's members.
const clusterToken = "fencekit-test"

// TestRestoreRunbook runs the etcd restore runbook of docs/operations.md
// ("After a restore") on a cluster of its own: take a snapshot, issue
// tokens after it, stop the cluster, restore every member from the
// snapshot, start it, and take locks again.
//
// Restored as it is ("plain"), the cluster hands out tokens already issued
// after the snapshot: that is the failure the runbook prevents. Restored
// as the runbook says, `etcdutl snapshot restore --bump-revision N
// --mark-compacted` (snapshot.RestoreConfig{RevisionBump: N,
// MarkCompacted: true}, the same code), every token issued afterwards is
// above every token issued before the restore, a fenced write with one is
// accepted, and reads at the old revisions are refused as compacted.
func TestRestoreRunbook(t *testing.T) {
	c := etcdtest.New(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	cl := client(t, c.Endpoints())
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	s := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns})

	// Tokens before the backup.
	takeAndWrite(ctx, t, b, s, "a", "b")

	snap := filepath.Join(t.TempDir(), "backup.db")
	saveSnapshot(ctx, t, c, snap)

	// Tokens issued after the backup: these must never be issued again.
	after := takeAndWrite(ctx, t, b, s, "a", "b", "c", "a", "b", "c")
	highest := after[len(after)-1]
	issued := map[fence.Token]bool{}
	for _, tok := range after {
		issued[tok] = true
	}

	t.Run("plain", func(t *testing.T) {
		// The failure the runbook exists for: restored without a bump,
		// the cluster's revision goes back to the snapshot's, and a token
		// issued after the snapshot is issued again.
		restoreCluster(t, c, snap, 0)
		cl := client(t, c.Endpoints())
		b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
		first := acquireWhenServing(t, b, "a")
		if first > highest {
			t.Fatalf("token after a plain restore = %d; want one at or below %d (the restore rewinds revisions)", first, highest)
		}
		// The next tokens run through the revisions issued after the
		// snapshot (each acquire of a free lock is one write), so one
		// of them is a token issued again.
		reissued := issued[first]
		for i := 0; !reissued && i < 2*len(after)+10; i++ {
			tok, err := acquire(ctx, b, fmt.Sprintf("plain/%d", i), "restore-probe", 10*time.Second)
			if err != nil {
				t.Fatalf("Acquire after a plain restore: %v", err)
			}
			reissued = issued[tok]
			if tok > highest {
				break
			}
		}
		if !reissued {
			t.Fatalf("after a plain restore no token issued after the snapshot %v was issued again; want one (the failure the runbook prevents)", after)
		}
	})

	t.Run("bump-revision", func(t *testing.T) {
		restoreCluster(t, c, snap, restoreBump)
		cl := client(t, c.Endpoints())
		b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
		s := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns})
		first := acquireWhenServing(t, b, "a")
		if first <= highest {
			t.Fatalf("first token after the runbook's restore = %d; want above %d, the highest issued before", first, highest)
		}
		if err := release(ctx, b, "a", "restore-probe"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		for _, tok := range takeAndWrite(ctx, t, b, s, "a", "b", "c", "d") {
			if tok <= highest {
				t.Fatalf("token %d after the runbook's restore: want above %d, the highest issued before", tok, highest)
			}
		}
		// --mark-compacted: a watcher or reader at a revision from before
		// the restore is told that it was compacted, rather than shown
		// a history that was never written.
		if _, err := cl.Get(ctx, ns, clientv3.WithRev(int64(highest))); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("Get at revision %d after the restore: %v; want %v", highest, err, rpctypes.ErrCompacted)
		}
	})
}

// takeAndWrite takes each lock in names in turn, writes the store key of
// the same name with the token, releases it, and returns the tokens.
func takeAndWrite(ctx context.Context, t *testing.T, b *fenceetcd.Backend, s *fenceetcd.Store, names ...string) []fence.Token {
	t.Helper()
	var toks []fence.Token
	for _, name := range names {
		o := testkit.Owner(t)
		tok, err := acquire(ctx, b, name, o, 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire(%q): %v", name, err)
		}
		if err := s.Put(ctx, name, tok, []byte(o)); err != nil {
			t.Fatalf("Put(%q, %d): %v", name, tok, err)
		}
		if err := release(ctx, b, name, o); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
		toks = append(toks, tok)
	}
	return toks
}

// saveSnapshot writes a snapshot of the cluster's data to path, as
// `etcdctl snapshot save` does (Maintenance.Snapshot of one member).
func saveSnapshot(ctx context.Context, t *testing.T, c *etcdtest.Cluster, path string) {
	t.Helper()
	cl := client(t, []string{c.Members[0].ClientURL})
	rc, err := cl.Snapshot(ctx)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		_ = f.Close()
		t.Fatalf("Snapshot: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// restoreCluster stops every member, replaces each one's data directory
// with the snapshot at path restored for it (`etcdutl snapshot restore`,
// with --bump-revision bump --mark-compacted when bump > 0), and starts the
// cluster again.
func restoreCluster(t *testing.T, c *etcdtest.Cluster, path string, bump uint64) {
	t.Helper()
	c.Close()
	var initial []string
	for _, m := range c.Members {
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		if err := os.RemoveAll(m.Dir); err != nil {
			t.Fatal(err)
		}
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath:        path,
			Name:                m.Name,
			OutputDataDir:       m.Dir,
			PeerURLs:            []string{m.PeerURL},
			InitialCluster:      strings.Join(initial, ","),
			InitialClusterToken: clusterToken,
			RevisionBump:        bump,
			MarkCompacted:       bump > 0,
		})
		if err != nil {
			t.Fatalf("restore %s: %v", m.Name, err)
		}
	}
	if err := c.Restart(c.Members...); err != nil {
		t.Fatalf("start the restored cluster: %v", err)
	}
}

// acquireWhenServing takes name for the owner "restore-probe" once the
// restored cluster serves, and returns the token.
func acquireWhenServing(t *testing.T, b *fenceetcd.Backend, name string) fence.Token {
	t.Helper()
	deadline := time.Now().Add(etcdtest.StartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tok, err := acquire(ctx, b, name, "restore-probe", 10*time.Second)
		cancel()
		if err == nil {
			return tok
		}
		if !driver.Retryable(err) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire(%q) after the restore: %v", name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%q) after the restore: still failing after %v: %v", name, etcdtest.StartTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
