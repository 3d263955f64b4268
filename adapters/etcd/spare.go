package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxSpare bounds the place leases a Backend keeps for reuse; the others
// lapse at the end of their TTL.
const maxSpare = 64

// spareLease is the etcd lease of a place that its waiter's acquisition
// deleted: it holds no key, and is kept for the next place of the same
// place TTL that this Backend makes, which renews it (a KeepAlive, no Raft
// write) instead of granting a new one (a Raft write, and another when the
// unused lease lapses).
type spareLease struct {
	id      clientv3.LeaseID
	place   time.Duration
	renewed time.Time // at or after its last renewal
}

// spares is a Backend's spare place leases.
type spares struct {
	mu sync.Mutex
	s  []spareLease
}

// putSpare keeps id, a place lease of place that holds no key any more and
// was last renewed before renewed, for reuse.
func (b *Backend) putSpare(id clientv3.LeaseID, place time.Duration, renewed time.Time) {
	if id == clientv3.NoLease {
		return
	}
	b.spares.mu.Lock()
	defer b.spares.mu.Unlock()
	if len(b.spares.s) < maxSpare {
		b.spares.s = append(b.spares.s, spareLease{id: id, place: place, renewed: renewed})
	}
}

// placeLease returns a lease for a new place of place: a spare one, renewed
// now (one KeepAlive), when one last renewed less than half its TTL ago is
// kept, else a new one (one LeaseGrant). A spare renewed is as a new grant:
// its place lasts place from now.
func (b *Backend) placeLease(ctx context.Context, place time.Duration) (clientv3.LeaseID, error) {
	for {
		id, ok := b.takeSpare(place)
		if !ok {
			return b.grant(ctx, place)
		}
		_, err := b.client.KeepAliveOnce(ctx, id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, err
		}
	}
}

// takeSpare removes and returns a spare lease of place that is young
// enough, dropping the stale ones.
func (b *Backend) takeSpare(place time.Duration) (clientv3.LeaseID, bool) {
	b.spares.mu.Lock()
	defer b.spares.mu.Unlock()
	for len(b.spares.s) > 0 {
		n := len(b.spares.s) - 1
		sp := b.spares.s[n]
		b.spares.s = b.spares.s[:n]
		if sp.place == place && time.Since(sp.renewed) < place/2 {
			return sp.id, true
		}
	}
	return 0, false
}
