package chaos

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock"
)

// pickSet draws the keys of a set: 2 or 3 of them (never more than there
// are), distinct, in random order. The Client sorts the names it is given,
// so the order tests that a caller's order does not matter: two workers ask
// for the same names in opposite orders, which would deadlock a lock that
// took them as given while holding the first.
func (w *worker) pickSet() []int {
	n := min(2+w.rng.IntN(2), w.r.cfg.Keys)
	return w.rng.Perm(w.r.cfg.Keys)[:n]
}

// setCycle takes the locks of keys as one set with DoMulti (no keep-alive:
// a real pause freezes the keep-alive too) and increments every key of the
// set under it, each write fenced with its own name's token.
func (w *worker) setCycle(ctx context.Context, keys []int) {
	cfg := &w.r.cfg
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = cfg.lockName(k)
	}
	ran := false
	// The backend records each attempt that returns tokens (see
	// recordingBackend.Acquire), with that attempt's own window.
	err := w.r.client.DoMulti(context.WithValue(ctx, attemptKey{}, w), names, cfg.TTL, func(_ context.Context, set *lock.MultiLease) error {
		ran = true
		w.underSet(keys, set)
		return nil // what DoMulti says of the set afterwards changes nothing here
	}, lock.WithKeepAlive(false))
	if !ran && err != nil {
		w.r.failed(ctx, err)
	}
}

// underSet is the work of a cycle while the worker believes it holds the
// set: Advance every key, read every key, then write every key's value plus
// one, each step in the set's order and each write through the lease of
// that key's own name. A pause past the TTL may freeze the worker before
// any of the three steps; it then carries on as if nothing happened, as in
// a one-name cycle.
func (w *worker) underSet(keys []int, set *lock.MultiLease) {
	cfg := &w.r.cfg
	w.acquired()
	for _, k := range keys {
		w.r.enter(k)
	}
	defer func() {
		for _, k := range keys {
			w.r.leave(k)
		}
	}()
	pauseAt := -1
	if cfg.PauseChance > 0 && w.rng.Float64() < cfg.PauseChance {
		pauseAt = w.rng.IntN(3)
	}
	tokens := make([]int64, len(keys))
	stores := make([]*lock.Writer, len(keys))
	for i, k := range keys {
		name := cfg.lockName(k)
		tokens[i] = int64(set.Token(name))
		stores[i] = set.Lease(name).Fenced(cfg.Store)
	}

	w.maybePause(pauseAt, 0)
	if !cfg.Unfenced {
		for i, k := range keys {
			store, key := stores[i], cfg.key(k)
			if w.write(Advance, k, tokens[i], 0, 0, func(c context.Context) error { return store.Advance(c, key) }) != OK {
				return // refused or unknown: some other holder has this name now
			}
		}
	}
	w.maybePause(pauseAt, 1)

	gets := make([]Op, len(keys))
	for i, k := range keys {
		get, ok := w.read(k, stores[i])
		if !ok {
			return
		}
		gets[i] = get
	}

	w.maybePause(pauseAt, 2)
	if cfg.Work > 0 {
		time.Sleep(time.Duration(w.rng.Int64N(int64(cfg.Work))))
	}
	if cfg.Transfer {
		w.transfer(keys, tokens, stores, gets)
		return
	}
	for i, k := range keys {
		w.increment(k, tokens[i], stores[i], gets[i])
	}
}
