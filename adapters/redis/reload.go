package redis

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// reloadEvery is the least time between two slot-map reloads that one
// Backend or Store asks of its cluster client.
const reloadEvery = 250 * time.Millisecond

// reloadEpoch gives the rate limit a monotonic clock to count from.
var reloadEpoch = time.Now()

// clusterReload asks a cluster client to reload its slot map after a call
// failed on the connection. go-redis's ClusterClient reloads by itself only
// after a MOVED, ASK or READONLY reply, or every ClusterStateReloadInterval
// (60 s by default): when a master dies and its replica is promoted, it
// keeps dialing the dead master until then. A reload is asked for at most
// once per reloadEvery, so a storm of failing calls does not flood the
// cluster with CLUSTER SLOTS. The failed call itself is not sent again (a
// sendOnce call must not be); the caller's next attempt reaches the new
// master once the reload has run. The nil *clusterReload (a client that is
// not a cluster) does nothing.
type clusterReload struct {
	client stateReloader
	last   atomic.Int64 // time of the last reload asked for, since reloadEpoch; 0: never
}

// newClusterReload returns the reloader for c, or nil when c has no slot
// map to reload (*goredis.ClusterClient has one, and so does any client
// that offers ReloadState).
func newClusterReload(c Client) *clusterReload {
	if r, ok := c.(stateReloader); ok {
		return &clusterReload{client: r}
	}
	return nil
}

// after asks for a reload when err is a connection-level error and the last
// reload was asked for at least reloadEvery ago. It reports whether it
// asked. ReloadState only starts the reload (go-redis runs it in the
// background, coalescing overlapping requests), so after never blocks.
func (r *clusterReload) after(err error) bool {
	if r == nil || !isConnError(err) {
		return false
	}
	now := int64(time.Since(reloadEpoch)) + 1 // never 0, the "never" mark
	last := r.last.Load()
	if last != 0 && now-last < int64(reloadEvery) {
		return false
	}
	if !r.last.CompareAndSwap(last, now) {
		return false // another call asked at the same moment
	}
	r.client.ReloadState(context.Background())
	return true
}

// isConnError reports whether err says the connection to a node failed:
// refused or unreachable on dial, reset, closed by the peer (EOF), or timed
// out on the socket. A server reply (a script error, MOVED, CLUSTERDOWN) is
// not one, nor is the end of the caller's context: neither says that the
// slot map points at a dead node.
func isConnError(err error) bool {
	switch {
	case err == nil, isRedisError(err),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		return true
	}
	var op *net.OpError // dial, read and write errors, i/o timeouts included
	return errors.As(err, &op)
}
