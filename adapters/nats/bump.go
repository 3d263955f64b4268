package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/fence"
)

// ErrBumpNotLeasesOnly is returned by Backend.Bump, which changes nothing,
// when the lease bucket holds a record that is not a lease: a Store's
// records (a Store sharing the bucket), or keys of another program. A bump
// removes every record of the bucket, which for a Store would erase its
// values and its fences.
var ErrBumpNotLeasesOnly = errors.New("fencekit/nats: bump refused: the bucket holds records other than leases, which a bump would erase")

// BumpResult is what Backend.Bump did.
type BumpResult struct {
	// Removed is the number of messages the bump removed from the bucket's
	// stream: the leases' records and their markers.
	Removed uint64
	// LastSeq is the stream's last sequence afterwards: every token issued
	// from then on is above it.
	LastSeq fence.Token
}

// Bump raises the bucket's stream sequence by by, so that every token the
// Backend issues afterwards is above every token issued before, those lost
// to a restore included. Run it after restoring the bucket from a backup
// (or after servers lost acknowledged writes), with every process that
// takes locks stopped, as docs/operations.md ("After a restore") says. by
// must exceed the number of messages the bucket may have received since
// the backup: every take, renewal and release of any lock in the bucket is
// one, and so is every change of a permit name.
//
// A client can raise a stream's sequence only by purging it: a purge up to
// a sequence above the last one leaves the stream empty, with that
// sequence next. So Bump removes every record of the bucket: every lease
// ends, as if it had expired (its holder's next renewal finds it gone),
// and so does every permit of a semaphore or read-write lock, whose name
// also forgets its last writer (a reader's next PriorWriter is 0, which a
// fenced value's fence is above: the read counts as possibly stale, the
// safe side; a restore may have rewound that last writer anyway).
// Bump therefore refuses, with an error matching ErrBumpNotLeasesOnly and
// nothing changed, when the bucket holds any record other than a lease or
// a permit name's state of some prefix: keep a Store's records in a bucket
// of their own. It also
// refuses a by that is not positive, or one that would take the sequence
// past fence.MaxToken (fence.ErrInvalid). A record written between Bump's
// check and its purge (a process that was not stopped) is removed with
// the rest, unchecked.
func (b *Backend) Bump(ctx context.Context, by int64) (BumpResult, error) {
	if by <= 0 {
		return BumpResult{}, fence.Invalid("nats: bump: %d is not positive", by)
	}
	sctx, cancel := b.b.withTimeout(ctx)
	defer cancel()
	s, err := b.b.js.Stream(sctx, b.b.stream)
	if err != nil {
		return BumpResult{}, fmt.Errorf("nats: bump: %w", noReply(sctx, err))
	}
	info, err := s.Info(sctx, jetstream.WithSubjectFilter(b.b.subject+">"))
	if err != nil {
		return BumpResult{}, fmt.Errorf("nats: bump: %w", noReply(sctx, err))
	}
	for subj := range info.State.Subjects {
		if !isLeaseKey(strings.TrimPrefix(subj, b.b.subject)) {
			return BumpResult{}, fmt.Errorf("%w: key %q of bucket %s is not a lease", ErrBumpNotLeasesOnly, strings.TrimPrefix(subj, b.b.subject), strings.TrimPrefix(b.b.stream, "KV_"))
		}
	}
	last := info.State.LastSeq
	// The next token, last+by+1, must not pass fence.MaxToken.
	if uint64(by) >= uint64(fence.MaxToken)-last {
		return BumpResult{}, fence.Invalid("nats: bump by %d: the next token after the stream's sequence, %d, would pass %d", by, last, fence.MaxToken)
	}
	next := last + uint64(by) + 1
	// The purge request as the JetStream API takes it, for its reply's
	// count of removed messages (the client's Purge drops it).
	req, _ := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{next})
	msg, err := b.b.js.Conn().RequestWithContext(sctx, b.b.api+"STREAM.PURGE."+b.b.stream, req)
	if err != nil {
		return BumpResult{}, fmt.Errorf("nats: bump: purge: %w", noReply(sctx, err))
	}
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
		Error   *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return BumpResult{}, fmt.Errorf("nats: bump: purge reply %q: %w", msg.Data, err)
	}
	if resp.Error != nil || !resp.Success {
		desc := "no success"
		if resp.Error != nil {
			desc = resp.Error.Description
		}
		return BumpResult{}, fmt.Errorf("nats: bump: purge: %s", desc)
	}
	return BumpResult{Removed: resp.Purged, LastSeq: fence.Token(next - 1)}, nil
}

// isLeaseKey reports whether key is a Backend's lease key,
// "<prefix>.lock.<base64url(name)>", or the state of a permit name,
// "<prefix>.permit.<base64url(name)>" (its permits are leases, and its
// last writer a token that a restore may have rewound as well), for any
// prefix.
func isLeaseKey(key string) bool {
	toks := strings.Split(key, ".")
	if len(toks) < 3 || toks[len(toks)-1] == "" {
		return false
	}
	kind := toks[len(toks)-2]
	return kind == "lock" || kind == "permit"
}
