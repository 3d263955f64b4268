package chaos

import (
	"context"

	"github.com/fencekit/fencekit/lock"
)

// transfer moves an amount from the first key of the set to the second,
// from the values gets read: the debit, then the credit, each a Put through
// its own name's lease (or plain, unfenced), both carrying one transfer id.
// A worker that paused past its TTL may see one half refused and the other
// accepted (another worker took one of the names, not the other): per-name
// fencing keeps each counter right, not the pair.
func (w *worker) transfer(keys []int, tokens []int64, stores []*lock.Writer, gets []Op) {
	cfg := &w.r.cfg
	amount := 1 + w.rng.Int64N(5)
	tid := w.r.newID()
	for i, delta := range []int64{-amount, amount} {
		k, store, key := keys[i], stores[i], cfg.key(keys[i])
		next, id := gets[i].Value+delta, w.r.newID()
		value := encodeValue(next, id)
		put := func(c context.Context) error { return store.Put(c, key, value) }
		if cfg.Unfenced {
			put = func(c context.Context) error { return cfg.Store.Put(c, key, unfencedToken, value) }
		}
		w.writeOp(Op{Kind: Put, Key: k, Token: tokens[i], Value: next, ID: id, Prev: gets[i].ID, Delta: delta, Transfer: tid}, put)
	}
}

// chains checks a transfer run's counters, whose values are not a count of
// writes: each counter's final read names the last write, each write names
// the one it read, and following them back to the start must pass through
// every write that landed on that key. A landed write off the chain was
// overwritten by a writer that had not read it (an update lost); a chain
// that runs into a write that did not land, or loops, is a counter state no
// landed write explains (extra). It also counts the transfers of which one
// half landed and the other did not (torn), and what those halves added up
// to (tornNet): every whole transfer adds nothing to the sum of the
// counters, so without lost updates that sum equals tornNet.
func chains(hist, final []Op, landed map[int64]bool) (lost, extra int64, torn int, tornNet int64) {
	puts := map[int64]Op{}
	for _, o := range hist {
		if o.Kind == Put && landed[o.ID] {
			puts[o.ID] = o // retries of one write share its id and content
		}
	}
	for _, f := range final {
		on := map[int64]bool{}
		for id := f.ID; id != 0; {
			p, ok := puts[id]
			if !ok || p.Key != f.Key || on[id] {
				extra++
				break
			}
			on[id] = true
			id = p.Prev
		}
		for id, p := range puts {
			if p.Key == f.Key && !on[id] {
				lost++
			}
		}
	}
	halves := map[int64][]Op{}
	for _, p := range puts {
		if p.Transfer != 0 {
			halves[p.Transfer] = append(halves[p.Transfer], p)
		}
	}
	for _, hs := range halves {
		if len(hs) == 1 {
			torn++
			tornNet += hs[0].Delta
		}
	}
	return lost, extra, torn, tornNet
}
