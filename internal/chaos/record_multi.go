package chaos

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// AcquireMulti passes a set acquisition on to a backend that takes sets in
// one step (lock.MultiBackend), recording each name's token as an Acquire
// with the call's window, as Acquire does for one name. Over any other
// backend it answers lock.ErrNotAtomic, having changed nothing, so that
// the Client takes the names one by one through Acquire, each recorded
// there.
func (b recordingBackend) AcquireMulti(ctx context.Context, names []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	mb, ok := b.Backend.(lock.MultiBackend)
	if !ok {
		return nil, lock.ErrNotAtomic
	}
	call := b.r.now()
	tokens, err := mb.AcquireMulti(ctx, names, owner, ttl)
	ret := b.r.now()
	if err == nil && len(tokens) == len(names) {
		for i, name := range names {
			b.record(ctx, name, owner, tokens[i], nil, call, ret)
		}
	}
	return tokens, err
}

// Release records the call before passing it on: a release may take effect
// at any time from its call, whatever its caller learns, so its call time is
// all the exclusion check needs (liveHolders).
func (b recordingBackend) Release(ctx context.Context, name, owner string) error {
	if k, ok := b.r.lockIndex[name]; ok {
		call := b.r.now()
		b.r.mu.Lock()
		b.r.releases = append(b.r.releases, Op{Kind: Release, Worker: -1, Key: k, Owner: owner, Outcome: OK, Call: call, Return: call})
		b.r.mu.Unlock()
	}
	return b.Backend.Release(ctx, name, owner)
}
