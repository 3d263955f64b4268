package chaos

import (
	"context"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// recordingBackend is the backend a lock run's Client uses: the configured
// one, with every Acquire call that returns a lock's token recorded, with
// the call's own invocation and return times. lock.Client.Acquire may make
// many attempts; the token comes from one of them, and only that one's
// window says when the token was minted. Timing the whole retry loop instead
// would let a backend hand a waiter a token below one returned while it
// waited. Every shape goes through Acquire (a lock with or without a place
// in line, a set of locks), so the workers wait in line as applications do
// and the run covers waiters under its faults too; a set records each
// name's token with the call's window. A resume adopts a token and mints
// none: it is not recorded as an acquisition. Every Release of a lock is
// recorded too, for the check that no two owners held one name at once.
type recordingBackend struct {
	driver.Backend
	r *runner
}

// Acquire passes the request on and records the locks it granted.
func (b recordingBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	call := b.r.now()
	g, err := b.Backend.Acquire(ctx, req)
	ret := b.r.now()
	if err != nil || req.Kind != driver.Exclusive || req.Resume {
		return g, err
	}
	if req.Names == nil {
		b.record(ctx, req.Name, req.Owner, g.Token, call, ret)
	} else if len(g.Tokens) == len(req.Names) {
		for i, name := range req.Names {
			b.record(ctx, name, req.Owner, g.Tokens[i], call, ret)
		}
	}
	return g, err
}

// record notes an acquisition call that returned tok for name, when a
// worker made it for one of the run's locks.
func (b recordingBackend) record(ctx context.Context, name, owner string, tok fence.Token, call, ret int64) {
	w, ok := ctx.Value(attemptKey{}).(*worker)
	k, known := b.r.lockIndex[name]
	if ok && known {
		w.record(Op{Kind: Acquire, Key: k, Token: int64(tok), Owner: owner, Outcome: OK, Call: call, Return: ret})
	}
}

// Release records the call before passing it on: a release may take effect
// at any time from its call, whatever its caller learns, so its call time is
// all the exclusion check needs (liveHolders).
func (b recordingBackend) Release(ctx context.Context, c driver.Claim) error {
	if k, ok := b.r.lockIndex[c.Name]; ok && c.Kind == driver.Exclusive {
		call := b.r.now()
		b.r.mu.Lock()
		b.r.releases = append(b.r.releases, Op{Kind: Release, Worker: -1, Key: k, Owner: c.Owner, Outcome: OK, Call: call, Return: call})
		b.r.mu.Unlock()
	}
	return b.Backend.Release(ctx, c)
}
