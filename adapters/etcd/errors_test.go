package etcd

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/lock/driver"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/raft/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// asClientSees is a server's gRPC error as clientv3 hands it to its caller:
// an rpctypes.EtcdError, without a gRPC status, when the client knows it.
func asClientSees(serverErr error) error {
	return clientv3.ContextError(context.Background(), serverErr)
}

// TestEtcdServerErrorsClassified: an etcd server error that a retry (on
// another member, after an election or a restart) may cure is marked
// transient, so that lock.Client retries it and a keep-alive survives it;
// the others are permanent. The errors are the ones the server sends, as
// clientv3 converts them.
func TestEtcdServerErrorsClassified(t *testing.T) {
	if errNotPrimaryDesc != lease.ErrNotPrimary.Error() {
		t.Fatalf("errNotPrimaryDesc = %q; the server says %q", errNotPrimaryDesc, lease.ErrNotPrimary)
	}
	if errRaftStoppedDesc != raft.ErrStopped.Error() {
		t.Fatalf("errRaftStoppedDesc = %q; raft says %q", errRaftStoppedDesc, raft.ErrStopped)
	}
	if errProposalDroppedDesc != raft.ErrProposalDropped.Error() {
		t.Fatalf("errProposalDroppedDesc = %q; raft says %q", errProposalDroppedDesc, raft.ErrProposalDropped)
	}
	// Without a gRPC mapping, the server sends these as Unknown.
	notPrimary := status.Error(codes.Unknown, lease.ErrNotPrimary.Error())
	raftStopped := status.Error(codes.Unknown, raft.ErrStopped.Error())
	proposalDropped := status.Error(codes.Unknown, raft.ErrProposalDropped.Error())
	retry := []error{
		rpctypes.ErrGRPCStopped,
		rpctypes.ErrGRPCTimeoutWaitAppliedIndex,
		notPrimary,
		raftStopped,
		proposalDropped,
		rpctypes.ErrGRPCNoLeader,
		rpctypes.ErrGRPCLeaderChanged,
		rpctypes.ErrGRPCTimeout,
		rpctypes.ErrGRPCTimeoutDueToLeaderFail,
		rpctypes.ErrGRPCTimeoutDueToConnectionLost,
		rpctypes.ErrGRPCUnhealthy,
		rpctypes.ErrGRPCRequestTooManyRequests,
		rpctypes.ErrGRPCNotCapable,
		rpctypes.ErrGRPCLeaseNotFound,
		status.Error(codes.Unavailable, "connection refused"),
	}
	permanent := []error{
		rpctypes.ErrGRPCNoSpace,
		rpctypes.ErrGRPCRequestTooLarge,
		rpctypes.ErrGRPCAuthFailed,
		rpctypes.ErrGRPCPermissionDenied,
		rpctypes.ErrGRPCInvalidAuthToken,
		rpctypes.ErrGRPCCorrupt,
		rpctypes.ErrGRPCCompacted,
		rpctypes.ErrGRPCEmptyKey,
		status.Error(codes.Unknown, "something else"),
	}
	for _, e := range retry {
		got := asClientSees(e)
		err := opError(context.Background(), "acquire", "n", got)
		if !driver.Retryable(err) || !errors.Is(err, driver.ErrTransient) {
			t.Errorf("%v (as the client sees it: %T): not retried; want it marked lock.Transient", e, got)
		}
		if !errors.Is(err, got) {
			t.Errorf("%v: the wrapped error does not match the client's error", e)
		}
	}
	for _, e := range permanent {
		got := asClientSees(e)
		if err := opError(context.Background(), "acquire", "n", got); driver.Retryable(err) {
			t.Errorf("%v (as the client sees it: %T): retried; want it permanent", e, got)
		}
	}
	// The case the issue names: the client's own values.
	for _, e := range []error{rpctypes.ErrStopped, rpctypes.ErrTimeoutWaitAppliedIndex} {
		if err := opError(context.Background(), "extend", "n", e); !driver.Retryable(err) {
			t.Errorf("%v: not retried", e)
		}
	}
}
