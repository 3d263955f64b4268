package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/lock/driver"
)

var (
	// ErrNoKeyTTL is returned by NewBackend when the server or the bucket
	// cannot expire a single key on the server: nats-server before 2.11
	// has no per-message TTL, and a bucket created without
	// LimitMarkerTTL (a stream without AllowMsgTTL) refuses it. A Backend
	// never falls back to judging expiry by a client's clock.
	ErrNoKeyTTL = errors.New("fencekit/nats: per-key TTL unavailable (needs nats-server 2.11 or later and a bucket with LimitMarkerTTL set)")

	// ErrBucketConfig is returned by NewBackend and NewStore when the
	// bucket is missing or configured so that the server would remove
	// records on its own: a bucket TTL (MaxAge) would end a lease before
	// its own TTL and erase a Store's fences.
	ErrBucketConfig = errors.New("fencekit/nats: unsuitable bucket")

	// ErrMalformedRecord is returned when a key of the bucket holds a
	// message that this package did not write (a plain KV Put, say), so
	// that its fence or owner cannot be read.
	ErrMalformedRecord = errors.New("fencekit/nats: malformed record")
)

// JetStream API error codes the package acts on.
const (
	// codeWrongLastSeq is the refusal of a write whose expected last
	// sequence for the subject is not the subject's last sequence.
	codeWrongLastSeq jetstream.ErrorCode = 10071
	// codeWrongLastSeqConstant is the same refusal as replicated streams
	// give it when the leader has a write to the subject in flight
	// (nats-server#7281): the write was not applied.
	codeWrongLastSeqConstant jetstream.ErrorCode = 10164
	// codeMsgNotFound answers a read of a subject that holds no message.
	codeMsgNotFound jetstream.ErrorCode = 10037
	// codeLastSeqNotReady: the leader cannot check an expected last
	// sequence yet (it has just been elected).
	codeLastSeqNotReady jetstream.ErrorCode = 10163
	// codeTTLDisabled: the stream refuses per-message TTLs.
	codeTTLDisabled jetstream.ErrorCode = 10166
)

// isConflict reports whether err is a compare-and-write refused because the
// key's last revision was not the expected one, in either of the server's
// two forms (10071, and 10164 on replicated buckets). Nothing was written.
func isConflict(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.ErrorCode == codeWrongLastSeq || ae.ErrorCode == codeWrongLastSeqConstant
}

// opError wraps a failed call. A failure that a retry may cure (no
// responders, a request timed out, a connection being re-made, JetStream
// temporarily unavailable during an election) is marked driver.Transient.
// When ctx has ended, the error matches ctx.Err() too.
func opError(ctx context.Context, op, key string, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("fencekit/nats: %s %q: %w: %w", op, key, cerr, err)
	}
	err = fmt.Errorf("fencekit/nats: %s %q: %w", op, key, err)
	if cerr == nil && transient(err) {
		return driver.Transient(err)
	}
	return err
}

// transient reports whether err is a failure of the server or of the path
// to it that a later attempt may not meet.
func transient(err error) bool {
	if errors.Is(err, errConnLost) || errors.Is(err, errNoReply) || errors.Is(err, errLeaderElected) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch {
	case errors.Is(err, errConnLost),
		errors.Is(err, natsgo.ErrTimeout),
		errors.Is(err, natsgo.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, natsgo.ErrConnectionReconnecting),
		errors.Is(err, natsgo.ErrDisconnected),
		errors.Is(err, natsgo.ErrStaleConnection):
		return true
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		// 503s are the server's "temporarily unavailable" family: no
		// leader, not enough resources yet, a leader not ready to check an
		// expected sequence.
		return ae.Code == 503 || ae.ErrorCode == codeLastSeqNotReady
	}
	return false
}
