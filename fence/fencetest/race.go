package fencetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/models"
)

// The shape of a race: in each round, raceWorkers goroutines wait at one
// barrier, then each makes raceWrites writes, each followed by a Get, on one
// fresh key. Worker w's j-th write carries token 2 + j*raceWorkers + perm[w]
// for a fresh permutation perm, so that the tokens of the workers interleave
// and every write has a neighbour with a higher token running at the same
// moment: a store that checks and then writes in two steps lets a lower
// token through after a higher one, and the round shows it.
const (
	raceRounds  = 6
	raceWorkers = 8
	raceWrites  = 6
)

// raceOp is one call made during a race.
type raceOp struct {
	worker    int
	kind      models.Kind
	token     fence.Token // writes
	value     []byte      // Put: written; Get: read (nil: not found)
	call, ret time.Duration
	err       error
	fence     fence.Token // Get: the fence read; a stale write: the fence reported
}

func (o raceOp) String() string {
	if o.kind == models.Get {
		return fmt.Sprintf("worker %d: Get -> value %q, fence %d, error %v [%v, %v]", o.worker, o.value, o.fence, o.err, o.call, o.ret)
	}
	return fmt.Sprintf("worker %d: %s(token %d) -> %v [%v, %v]", o.worker, o.kind, o.token, o.err, o.call, o.ret)
}

func checkConcurrentPuts(ctx context.Context, s fence.Store, ns string) error {
	return race(ctx, s, ns, func(*mrand.Rand) models.Kind { return models.Put })
}

func checkConcurrentDeletes(ctx context.Context, s fence.Store, ns string) error {
	return race(ctx, s, ns, func(*mrand.Rand) models.Kind { return models.Delete })
}

func checkConcurrentAdvances(ctx context.Context, s fence.Store, ns string) error {
	return race(ctx, s, ns, func(*mrand.Rand) models.Kind { return models.Advance })
}

func checkConcurrentMixed(ctx context.Context, s fence.Store, ns string) error {
	kinds := []models.Kind{models.Put, models.Delete, models.Advance}
	return race(ctx, s, ns, func(rng *mrand.Rand) models.Kind { return kinds[rng.IntN(len(kinds))] })
}

// race runs raceRounds rounds whose writes are of the kinds pick chooses,
// and checks each.
func race(ctx context.Context, s fence.Store, ns string, pick func(*mrand.Rand) models.Kind) error {
	seed := mrand.Uint64()
	for r := range raceRounds {
		k := fmt.Sprintf("%srace%d", ns, r)
		ops, err := raceRound(ctx, s, k, mrand.New(mrand.NewPCG(seed, uint64(r))), pick)
		if err == nil {
			err = verifyRace(ctx, s, k, ops)
		}
		if err != nil {
			return fmt.Errorf("round %d of %d on key %q: %w", r+1, raceRounds, k, err)
		}
	}
	return nil
}

// raceInitial is the value every round's key starts with, at token 1.
var raceInitial = []byte("initial")

// raceRound runs one round on key k and returns every call it made.
func raceRound(ctx context.Context, s fence.Store, k string, rng *mrand.Rand, pick func(*mrand.Rand) models.Kind) ([]raceOp, error) {
	if err := s.Put(ctx, k, 1, raceInitial); err != nil {
		return nil, accepted("Put", k, 1, err)
	}
	perm := rng.Perm(raceWorkers)
	kinds := make([][]models.Kind, raceWorkers)
	for w := range kinds {
		for range raceWrites {
			kinds[w] = append(kinds[w], pick(rng))
		}
	}
	start := time.Now()
	barrier := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]raceOp, raceWorkers)
	for w := range raceWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-barrier
			for j, kind := range kinds[w] {
				o := raceOp{worker: w, kind: kind, token: fence.Token(2 + j*raceWorkers + perm[w])}
				o.call = time.Since(start)
				switch kind {
				case models.Put:
					o.value = fmt.Appendf(nil, "w%d-%d", w, j)
					o.err = s.Put(ctx, k, o.token, o.value)
				case models.Delete:
					o.err = s.Delete(ctx, k, o.token)
				case models.Advance:
					o.err = s.Advance(ctx, k, o.token)
				}
				o.ret = time.Since(start)
				var se *fence.StaleError
				if errors.As(o.err, &se) {
					o.fence = se.Fence
				}
				g := raceOp{worker: w, kind: models.Get, call: time.Since(start)}
				rec, err := s.Get(ctx, k)
				g.ret = time.Since(start)
				g.value, g.fence, g.err = rec.Value, rec.Fence, err
				results[w] = append(results[w], o, g)
			}
		}()
	}
	close(barrier)
	wg.Wait()
	var ops []raceOp
	for _, r := range results {
		ops = append(ops, r...)
	}
	return ops, nil
}

// verifyRace checks a round against what any atomic store may produce.
// Accepted writes take effect in the order of their tokens (each raises the
// fence to its own token), so the fence a call sees determines the value
// exactly: the one written by the accepted Put or Delete with the highest
// token at or below that fence.
func verifyRace(ctx context.Context, s fence.Store, k string, ops []raceOp) error {
	var top raceOp // the write with the highest token
	for _, o := range ops {
		if o.kind != models.Get && o.token > top.token {
			top = o
		}
	}
	for _, o := range ops {
		switch {
		case o.kind == models.Get:
			if o.err != nil && !errors.Is(o.err, fence.ErrNotFound) {
				return fmt.Errorf("unexpected error: %s", o)
			}
		case o.err == nil:
		case errors.Is(o.err, fence.ErrStale):
			if err := expectStale(o.kind.String(), o.err, k, o.token, o.fence); err != nil {
				return err
			}
			if o.fence <= o.token {
				return fmt.Errorf("refused with a fence not above the token: %s", o)
			}
		default:
			return fmt.Errorf("unexpected error: %s", o)
		}
	}
	if top.err != nil {
		return fmt.Errorf("the highest token was refused, though no write carried a higher one: %s", top)
	}
	// valueAt is the value the key must hold when its fence is f.
	valueAt := func(f fence.Token) []byte {
		v, vt := raceInitial, fence.Token(1)
		for _, o := range ops {
			if o.err == nil && o.kind != models.Get && o.kind != models.Advance && o.token <= f && o.token > vt {
				v, vt = o.value, o.token
			}
		}
		return v
	}
	// issued reports whether some write with token f was called before t.
	issued := func(f fence.Token, t time.Duration) bool {
		for _, o := range ops {
			if o.kind != models.Get && o.token == f && o.call <= t {
				return true
			}
		}
		return f == 1
	}
	for _, o := range ops {
		// The fence never goes down: whatever a call sees or does, it is
		// at least the highest token accepted before it was called.
		var floor raceOp
		for _, a := range ops {
			if a.kind != models.Get && a.err == nil && a.ret < o.call && a.token > floor.token {
				floor = a
			}
		}
		switch {
		case o.kind != models.Get && o.err == nil:
			if o.token < floor.token {
				return fmt.Errorf("a lower token was accepted after a higher one had been:\n  %s\n  then %s", floor, o)
			}
		case o.kind == models.Get || errors.Is(o.err, fence.ErrStale):
			if o.fence < floor.token {
				return fmt.Errorf("the fence went down:\n  %s\n  then %s", floor, o)
			}
			if !issued(o.fence, o.ret) {
				return fmt.Errorf("a fence that no write had offered: %s", o)
			}
		}
		if o.kind == models.Get {
			want := valueAt(o.fence)
			if (o.err == nil) != (want != nil) || !bytes.Equal(o.value, want) {
				return fmt.Errorf("at fence %d the value must be %q: %s", o.fence, want, o)
			}
		}
	}
	f := top.token
	if v := valueAt(f); v != nil {
		return expectValue(ctx, s, k, v, f)
	}
	return expectNoValue(ctx, s, k, f)
}
