package redis

import (
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/lock/driver"
)

// transientReplies are the server replies that mean "try again": the
// server is loading its data set (LOADING) or running a slow script (BUSY),
// a failover is under way (READONLY from a demoted primary, MASTERDOWN from
// a replica that lost its primary, CLUSTERDOWN), a cluster slot is being
// migrated (TRYAGAIN), or too few replicas are connected for
// min-replicas-to-write (NOREPLICAS). The command did not run, and the same
// command later may succeed. Every other reply (NOAUTH, WRONGPASS, NOPERM,
// WRONGTYPE, a script error, token exhaustion) fails the same way again.
var transientReplies = []string{"LOADING ", "BUSY ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN ", "READONLY ", "NOREPLICAS "}

// isTransientReply reports whether err is one of transientReplies.
func isTransientReply(err error) bool {
	for _, p := range transientReplies {
		if goredis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// opError wraps a failed call to Redis with the operation and the lock name
// or key, and marks it with driver.Transient when the server asked to try
// again, so that driver.Retryable judges it right. Transport errors need no
// mark: driver.Retryable recognises them.
func opError(op, name string, err error) error {
	wrapped := fmt.Errorf("fencekit/redis: %s %q: %w", op, name, err)
	if isTransientReply(err) {
		return driver.Transient(wrapped)
	}
	return wrapped
}
