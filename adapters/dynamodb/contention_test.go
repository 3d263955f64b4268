package dynamodb_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestContentionUnderFaults runs the contention run of every backend
// (chaos.RunContention) on a dynalite of its own behind the fault proxy:
// 16 workers on one lock, a semaphore and a read-write lock at once, with
// pauses past the TTL, waits given up, waiters killed in line, network
// faults (delays, cuts, lost replies) and restarts of the server. The
// dynalite keeps its tables in LevelDB on disk (dynalitetest.StartOnDisk),
// so a restart (a kill -9 and a start on the same store) loses no
// acknowledged write: ServerForgets is false. Against a server
// FENCEKIT_DYNAMODB_URL names, which the test cannot restart, it runs
// without restarts.
//
// Timing. A Backend judges an entry (a lease, a place) run out once it has
// watched it unchanged for its whole TTL, from the reply that first showed
// it (docs/dynamodb.md, "Expiry without clocks"), and a waiter reads its
// item every 50 ms (PollInterval): a paused holder's lease, or a killed
// waiter's place, is over for the waiters up to 50 ms and a read's round
// trip after its TTL, within the bound's TTL and two place TTLs. A Backend
// that first sees an entry waits a whole TTL even when it ran out long
// before; here one Backend serves every worker (a killed waiter's Client
// wraps it too) and keeps what it watched across the server's restarts,
// so that wait comes only at the start, while the faults go on. So TTL
// keeps the default, 500 ms.
//
// PlaceTTL is 3 s, not 1 s: every waiter renews its place every third of
// the place TTL, and on this backend a renewal is a read and a conditional
// write of the name's one item, the item every other waiter renews and the
// holder acquires and releases on. 16 waiters renewing 1 s places make 48
// such writes a second on the lock's item, which, with their conflicts
// retried, starve the holder's own (about ten acquisitions in 15 s on a
// loaded machine); with 3 s places they are 16 a second.
//
// CycleCost is 250 ms, not 100 ms: a cycle on this backend is about eight
// requests to one Node.js process (the holder's read and conditional write
// for the Acquire and for the Release, its Store read and write, the next
// waiter's poll, up to 50 ms after the release, and its own read and
// write), while 30 waiters poll it every 50 ms and conditional writes that
// meet another writer are retried after a short random wait.
func TestContentionUnderFaults(t *testing.T) {
	chaos.RunContentionTest(t, func(t *testing.T) chaos.ContentionConfig {
		var srv *dynalitetest.Server
		var restart func(context.Context) error
		if strings.TrimSpace(os.Getenv(dynalitetest.URLEnv)) != "" {
			srv = server(t)
		} else {
			var err error
			srv, err = dynalitetest.StartOnDisk(t.TempDir())
			if err != nil {
				testkit.Unavailable(t, "dynalite", err.Error())
			}
			t.Cleanup(srv.Stop)
			if err := fenceddb.Migrate(context.Background(), srv.Client(), testTable); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			restart = func(context.Context) error { return srv.Restart() }
		}
		p := testkit.NewProxy(t, srv.Addr())
		endpoint := "http://" + p.Addr()
		client := srv.Client(func(o *awsddb.Options) { o.BaseEndpoint = &endpoint })
		prefix := testkit.Namespace(t) + "/"
		b, err := fenceddb.NewBackend(client, testTable, &fenceddb.BackendOptions{Prefix: prefix + "lock/"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := fenceddb.NewStore(client, testTable, &fenceddb.StoreOptions{Prefix: prefix + "store/"})
		if err != nil {
			t.Fatal(err)
		}
		cfg := chaos.ContentionConfig{
			Name: "dynamodb", Backend: b, Store: s,
			PlaceTTL:  3 * time.Second,
			CycleCost: 250 * time.Millisecond,
			Network:   chaos.ProxyNetwork(p),
		}
		if restart != nil {
			cfg.Restart = restart
		}
		return cfg
	})
}
