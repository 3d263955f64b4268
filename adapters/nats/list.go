package nats

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/lock"
)

// List returns the locks held now whose names start with prefix ("" for
// all), sorted by name, each with its holder: owner, token, remaining TTL
// and metadata. A
// lock's KV key holds its name base64url-encoded, so no subject filter
// selects a name prefix: List asks the stream for the subjects under
// "<Prefix>.lock." (one stream info request, paged by nats.go), keeps the
// names that start with prefix, reads each one's last message on the
// stream's leader, and leaves out those that are free (a release or expiry
// marker). Remaining TTLs are judged by the server's clock, read once after
// the leases. It leaves Waiting 0: Waiters counts the places in line. It
// costs one round trip per lock under the Backend's Prefix, and is meant
// for operators (fencectl), not for hot paths.
func (b *Backend) List(ctx context.Context, prefix string) ([]lock.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, err := b.lockNames(ctx)
	if err != nil {
		return nil, opError(ctx, "list", prefix, err)
	}
	sort.Strings(names)
	type held struct {
		info lock.Info
		end  time.Time
	}
	var found []held
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		cur, l, err := b.readLease(ctx, b.Key(name))
		if err != nil {
			return nil, opError(ctx, "list", prefix, fmt.Errorf("lock %q: %w", name, err))
		}
		if l == nil {
			continue // released, or expired by the server
		}
		ttl, err := parseMsgTTL(cur.header.Get(ttlHeader))
		if err != nil {
			return nil, fmt.Errorf("fencekit/nats: list %q: lock %q: %w", prefix, name, err)
		}
		found = append(found, held{
			info: lock.Info{Name: name, Holders: []lock.Holder{{Owner: l.owner, Token: l.token, Metadata: l.metadata}}},
			end:  cur.time.Add(ttl),
		})
	}
	if len(found) == 0 {
		return nil, nil
	}
	now, err := b.serverNow(ctx)
	if err != nil {
		return nil, opError(ctx, "list", prefix, err)
	}
	infos := make([]lock.Info, len(found))
	for i, h := range found {
		h.info.Holders[0].TTL = max(h.end.Sub(now), time.Millisecond)
		infos[i] = h.info
	}
	return infos, nil
}

// lockNames returns the names of the locks whose KV keys have messages in
// the stream: held, or free with a marker the server has not removed yet.
func (b *Backend) lockNames(ctx context.Context) ([]string, error) {
	return b.keyNames(ctx, "lock")
}

// keyNames returns the names whose KV keys "<Prefix>.<part>.<name>" have
// messages in the stream.
func (b *Backend) keyNames(ctx context.Context, part string) ([]string, error) {
	ctx, cancel := b.b.withTimeout(ctx)
	defer cancel()
	under := b.b.subject + b.b.prefix + "." + part + "."
	var subjects map[string]uint64
	err := untilConnLost(ctx, b.b.js.Conn(), b.b.elections.next(), func(ctx context.Context) error {
		s, err := b.b.js.Stream(ctx, b.b.stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(under+"*"))
		if err != nil {
			return err
		}
		subjects = info.State.Subjects
		return nil
	})
	if err = noReply(ctx, err); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(subjects))
	for subj := range subjects {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(subj, under))
		if err != nil {
			return nil, fmt.Errorf("%w: subject %q holds no encoded %s name", ErrMalformedRecord, subj, part)
		}
		names = append(names, string(raw))
	}
	return names, nil
}

// PermitNames returns the permit names (semaphores and read-write locks)
// whose names start with prefix ("" for all) and whose keys have a message
// in the stream, sorted by name: those in use, and idle ones whose state
// (kept for its last writer) the server still holds. It is meant for
// operators (fencectl): Inspect each name with a permit kind for its
// holders, and leave out the idle ones. It costs one stream info request.
func (b *Backend) PermitNames(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all, err := b.keyNames(ctx, "permit")
	if err != nil {
		return nil, opError(ctx, "list permit names", prefix, err)
	}
	var names []string
	for _, name := range all {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}
