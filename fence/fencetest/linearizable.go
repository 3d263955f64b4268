package fencetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/models"
)

// LinearizableOptions tune Linearizable. The zero value (or nil) means the
// defaults, sized to finish in well under a second on an in-process store
// and in a few seconds on a networked one.
type LinearizableOptions struct {
	// Workers is the number of goroutines calling the store at once
	// (default 6).
	Workers int
	// Ops is the number of calls each worker makes (default 60).
	Ops int
	// Keys is the number of keys the workers share (default 2). Fewer keys
	// mean more contention on each.
	Keys int
	// Interrupt is the fraction of calls made with a context that ends at a
	// random moment during the call (default 0.1; negative: none). Those
	// calls may fail with an unknown outcome, which the history records as
	// such: a write that may or may not have taken effect.
	Interrupt float64
	// CheckTimeout bounds the linearizability checker on each key's history
	// (default 30 s). A history it cannot decide in time fails the test.
	CheckTimeout time.Duration
	// Seed fixes the random choices (0: a random seed, logged on failure).
	Seed uint64
}

func (o *LinearizableOptions) withDefaults() LinearizableOptions {
	var v LinearizableOptions
	if o != nil {
		v = *o
	}
	if v.Workers <= 0 {
		v.Workers = 6
	}
	if v.Ops <= 0 {
		v.Ops = 60
	}
	if v.Keys <= 0 {
		v.Keys = 2
	}
	switch {
	case v.Interrupt == 0:
		v.Interrupt = 0.1
	case v.Interrupt < 0:
		v.Interrupt = 0
	}
	if v.CheckTimeout <= 0 {
		v.CheckTimeout = 30 * time.Second
	}
	if v.Seed == 0 {
		v.Seed = mrand.Uint64() | 1
	}
	return v
}

// Linearizable runs concurrent workers doing random Put, Get, Delete and
// Advance calls on a few shared keys of store, with tokens that overlap
// between workers (equal, lower and higher than the fence, all at once),
// records every call with its outcome (accepted, stale, not found, or
// unknown when the call failed otherwise), and checks the history of each
// key with porcupine against the fenced register (internal/models): there
// must be one order of the calls, consistent with real time, in which every
// result is what the contract prescribes. Every Put writes a value that
// names the write, so a read is checked for which write it saw, not only for
// its bytes. It fails t when the history is not linearizable, showing the
// calls around the point where no order fits.
//
// Call it from the store's own tests, next to Run:
//
//	fencetest.Linearizable(t, store, nil)
func Linearizable(t testing.TB, store fence.Store, opts *LinearizableOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*Timeout)
	defer cancel()
	o := opts.withDefaults()
	if err := CheckLinearizable(ctx, store, Namespace(), &o); err != nil {
		t.Fatalf("%v\n(seed %d)", err, o.Seed)
	}
}

// CheckLinearizable is Linearizable without testing.TB: it returns an error
// describing the first key whose history is not linearizable. Every key it
// uses starts with ns.
func CheckLinearizable(ctx context.Context, store fence.Store, ns string, opts *LinearizableOptions) error {
	o := opts.withDefaults()
	keys := make([]string, o.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%slin%d", ns, i)
	}
	var (
		clock   atomic.Int64 // the lease tokens handed out so far
		writeID atomic.Int64
		start   = time.Now()
		wg      sync.WaitGroup
		mu      sync.Mutex
		hist    = make([][]linOp, len(keys))
		failure error
	)
	barrier := make(chan struct{})
	for w := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(o.Seed, uint64(w)))
			<-barrier
			for range o.Ops {
				k := rng.IntN(len(keys))
				// Workers mostly write with the newest token, sometimes a
				// little older one (a holder that lost its lease), and
				// sometimes take a new one.
				tok := clock.Load()
				switch r := rng.IntN(10); {
				case r < 3 || tok == 0:
					tok = clock.Add(1)
				case r < 5:
					tok = max(tok-int64(rng.IntN(3))-1, 1)
				}
				op := linOp{worker: w, in: models.RegisterInput{Token: tok}}
				switch rng.IntN(4) {
				case 0:
					op.in.Kind = models.Get
				case 1:
					op.in.Kind, op.in.Write = models.Put, writeID.Add(1)
				case 2:
					op.in.Kind = models.Delete
				default:
					op.in.Kind = models.Advance
				}
				cctx, cancel := context.WithCancel(ctx)
				interrupt := time.AfterFunc(time.Hour, cancel)
				if rng.Float64() < o.Interrupt {
					interrupt.Reset(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
				}
				op.call = time.Since(start).Nanoseconds()
				err := op.do(cctx, store, keys[k], ns)
				op.ret = time.Since(start).Nanoseconds()
				interrupt.Stop()
				cancel()
				mu.Lock()
				if err != nil && failure == nil {
					failure = err
				}
				hist[k] = append(hist[k], op)
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	close(barrier)
	wg.Wait()
	if failure != nil {
		return failure
	}
	end := time.Since(start).Nanoseconds()
	for k, ops := range hist {
		if err := checkHistory(keys[k], ops, end, o.CheckTimeout); err != nil {
			return err
		}
	}
	return nil
}

// linOp is one call of a Linearizable history.
type linOp struct {
	worker    int
	in        models.RegisterInput
	out       models.RegisterOutput
	call, ret int64
}

func (o linOp) String() string {
	m := models.Register(models.RegisterState{})
	ret := strconv.FormatInt(o.ret, 10)
	if o.ret == math.MaxInt64 {
		ret = "?"
	}
	return fmt.Sprintf("worker %d: %s [%d, %s]", o.worker, m.DescribeOperation(o.in, o.out), o.call, ret)
}

// linValue is what the Put with write id writes: the id, readable back.
func linValue(ns string, id int64) []byte {
	return []byte(ns + "write-" + strconv.FormatInt(id, 10))
}

// do makes the call and records its outcome. It returns an error only for
// results no history can explain (a value no write wrote, a malformed
// StaleError, refused input).
func (o *linOp) do(ctx context.Context, s fence.Store, key, ns string) error {
	tok := fence.Token(o.in.Token)
	var err error
	switch o.in.Kind {
	case models.Get:
		rec, gerr := s.Get(ctx, key)
		switch {
		case gerr == nil:
			id, ok := strings.CutPrefix(string(rec.Value), ns+"write-")
			n, perr := strconv.ParseInt(id, 10, 64)
			if !ok || perr != nil {
				return fmt.Errorf("Get(%q) = %q: no Put wrote that value", key, abbrev(rec.Value))
			}
			o.out = models.RegisterOutput{Outcome: models.OK, Write: n, Fence: int64(rec.Fence), FenceKnown: true}
		case errors.Is(gerr, fence.ErrNotFound):
			o.out = models.RegisterOutput{Outcome: models.NotFound, Fence: int64(rec.Fence), FenceKnown: true}
		default:
			o.out = models.RegisterOutput{Outcome: models.Unknown}
		}
		return nil
	case models.Put:
		err = s.Put(ctx, key, tok, linValue(ns, o.in.Write))
	case models.Delete:
		err = s.Delete(ctx, key, tok)
	case models.Advance:
		err = s.Advance(ctx, key, tok)
	}
	var se *fence.StaleError
	switch {
	case err == nil:
		o.out.Outcome = models.OK
	case errors.Is(err, fence.ErrStale):
		if !errors.As(err, &se) || se.Key != key || se.Token != tok {
			return fmt.Errorf("%s(%q, token %d): %v is not a *fence.StaleError for this key and token", o.in.Kind, key, tok, err)
		}
		o.out = models.RegisterOutput{Outcome: models.Stale, Fence: int64(se.Fence), FenceKnown: true}
	case errors.Is(err, fence.ErrInvalid):
		return fmt.Errorf("%s(%q, token %d): valid input refused: %v", o.in.Kind, key, tok, err)
	default:
		o.out.Outcome = models.Unknown
	}
	return nil
}

// checkHistory checks one key's history; end is when the last call returned.
func checkHistory(key string, ops []linOp, end int64, limit time.Duration) error {
	var hist []porcupine.Operation
	var kept []linOp
	for _, o := range ops {
		if o.out.Outcome == models.Unknown {
			if o.in.Kind == models.Get {
				continue // a failed read tells nothing
			}
			o.ret = end + 1 // it may land at any moment after its call
		}
		kept = append(kept, o)
		hist = append(hist, porcupine.Operation{ClientId: o.worker, Input: o.in, Output: o.out, Call: o.call, Return: o.ret})
	}
	model := models.Register(models.RegisterState{})
	res, info := porcupine.CheckOperationsVerbose(model, hist, limit)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("key %q: the checker could not decide %d calls within %v; use fewer Ops or Workers", key, len(hist), limit)
	}
	return fmt.Errorf("key %q: the history of %d calls is not linearizable:\n%s", key, len(hist), describeStuck(info, kept))
}

// describeStuck shows the calls around the first one (in call order) that
// the longest partial linearization could not place.
func describeStuck(info porcupine.LinearizationInfo, ops []linOp) string {
	placed := map[int]bool{}
	longest := -1
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > longest {
				longest = len(lin)
				placed = map[int]bool{}
				for _, id := range lin {
					placed[id] = true
				}
			}
		}
	}
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ops[a].call, ops[b].call) })
	stuck := 0
	for pos, i := range order {
		if !placed[i] {
			stuck = pos
			break
		}
	}
	var b strings.Builder
	from, to := max(stuck-10, 0), min(stuck+6, len(order))
	fmt.Fprintf(&b, "  calls %d to %d of %d in call order; no order of the calls fits the one marked >:\n", from, to-1, len(order))
	for pos := from; pos < to; pos++ {
		mark := "   "
		if pos == stuck {
			mark = " > "
		}
		fmt.Fprintf(&b, "  %s%s\n", mark, ops[order[pos]])
	}
	return b.String()
}
