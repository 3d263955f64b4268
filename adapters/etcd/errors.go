package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencekit/fencekit/lock/driver"
)

// opError wraps a failed etcd call. A failure that a retry may cure (no
// leader, a leader change, a member's server stopped, a request timed out
// inside the cluster, a member unreachable, too many requests; see
// transient) is marked driver.Transient, so lock.Client retries it and a
// keep-alive tries again. When ctx has ended, the error matches ctx.Err()
// too, whatever the server answered (a server that saw the deadline pass
// answers "request timed out").
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
		return driver.Transient(err)
	}
	return err
}

// transient reports whether err is a failure of the cluster or of the path to
// it that a later attempt may not meet.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// clientv3 turns the errors it knows into rpctypes.EtcdError values,
	// which carry the gRPC code but no gRPC status: judge them by the code.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return transientEtcd(ee)
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		switch st.Code() {
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded:
			return true
		case codes.Unknown:
			// A server error without a gRPC mapping reaches the client as
			// Unknown with the server's message.
			switch st.Message() {
			case errNotPrimaryDesc, errRaftStoppedDesc, errProposalDroppedDesc:
				return true
			}
		}
	}
	return false
}

// Server errors without a gRPC mapping that another member, or the same one
// a moment later, does not return. They arrive as codes.Unknown with these
// messages.
const (
	// errNotPrimaryDesc is the server's lease.ErrNotPrimary: a member that
	// believed it led could not confirm its leadership when asked to renew
	// a lease, and answers so that the client tries another member.
	errNotPrimaryDesc = "not a primary lessor"
	// errRaftStoppedDesc is raft's ErrStopped: the member's server has
	// stopped (it is shutting down, or was removed) while its client port
	// still answers; a write (a lease grant, a Txn) is refused before it is
	// proposed, so nothing was applied.
	errRaftStoppedDesc = "raft: stopped"
	// errProposalDroppedDesc is raft's ErrProposalDropped: the member
	// dropped a write's proposal (it knew no leader, or the leadership was
	// being handed over), so the write was never applied.
	errProposalDroppedDesc = "raft proposal dropped"
)

// transientEtcd judges an etcd server error by its code. Every Unavailable
// one (no leader, leader changed, server stopped, request timed out for any
// reason, unhealthy cluster) passes with an election or a restart, or on
// another member. Of the rest, only these do: too many requests (a busy
// server), not capable (a member that has not caught up with the cluster's
// version), and a lease not found (the lease granted for a Txn lapsed before
// the Txn ran: the Txn did nothing, and a new grant may be in time). A full
// database (ResourceExhausted "database space exceeded") needs an operator,
// and authentication, permission and invalid-request errors repeat.
func transientEtcd(ee rpctypes.EtcdError) bool {
	if ee.Code() == codes.Unavailable {
		return true
	}
	switch ee {
	case rpctypes.ErrTooManyRequests, rpctypes.ErrNotCapable, rpctypes.ErrLeaseNotFound:
		return true
	}
	return false
}
