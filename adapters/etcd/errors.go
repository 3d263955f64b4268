package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencekit/fencekit/lock"
)

// opError wraps a failed etcd call. A failure that a retry may cure (no
// leader, a leader change, a request timed out inside the cluster, a member
// unreachable, too many requests) is marked lock.Transient, so lock.Client
// retries it. When ctx has ended, the error matches ctx.Err() too, whatever
// the server answered (a server that saw the deadline pass answers "request
// timed out").
func opError(ctx context.Context, op, name string, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		// gRPC (or the server, from the grpc-timeout header) can report
		// the deadline a moment before the context's own timer fires.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("fencekit/etcd: %s %q: %w: %w", op, name, cerr, err)
	}
	err = fmt.Errorf("fencekit/etcd: %s %q: %w", op, name, err)
	if transient(err) {
		return lock.Transient(err)
	}
	return err
}

// transient reports whether err is a failure of the cluster or of the path to
// it that a later attempt may not meet.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrLeaderChanged) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) || errors.Is(err, rpctypes.ErrTooManyRequests) ||
		errors.Is(err, rpctypes.ErrNotCapable) ||
		// A lease granted for a Txn lapsed before the Txn ran: the Txn did
		// nothing, and a new grant may be in time.
		errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return true
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		switch se.GRPCStatus().Code() {
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}
