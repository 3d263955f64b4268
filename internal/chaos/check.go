package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/internal/models"
)

// Verdict is the result of one linearizability check.
type Verdict struct {
	Result   porcupine.CheckResult // porcupine.Ok, Illegal or Unknown (timed out)
	Ops      int                   // operations checked
	Segments int                   // independent pieces the history was cut into
	// Failure describes the first segment that is not linearizable: its
	// operations, in call order (at most a few dozen).
	Failure string
}

// String is the verdict as the report prints it.
func (v Verdict) String() string {
	switch v.Result {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "NOT LINEARIZABLE"
	}
	return "undecided (checker timed out)"
}

// segment is a piece of one key's (or lock's) history that can be checked on
// its own: every operation before it returned before its first call, and
// the state it starts from is known exactly.
type segment[S any] struct {
	ops  []Op
	init S
}

// minSegment is the shortest segment worth cutting off: porcupine's memory
// grows with the square of a segment's length, and each check has a fixed
// cost.
const minSegment = 200

// split cuts ops (of one key or lock) into segments. It cuts after an
// operation that overlaps no other and whose result fixes the state
// exactly (after reports it): no operation can then be ordered on the other
// side of it, so the rest of the history starts from that state. ops must be
// sorted by Call.
func split[S any](ops []Op, init S, after func(Op) (S, bool)) []segment[S] {
	var segs []segment[S]
	start := 0
	state := init
	prevMax := int64(-1 << 63) // the latest Return before op i
	for i, o := range ops {
		last := i == len(ops)-1
		if !last && i+1-start >= minSegment && prevMax < o.Call && o.Return < ops[i+1].Call {
			if s, ok := after(o); ok {
				segs = append(segs, segment[S]{ops: ops[start : i+1], init: state})
				start, state = i+1, s
			}
		}
		prevMax = max(prevMax, o.Return)
	}
	if start < len(ops) {
		segs = append(segs, segment[S]{ops: ops[start:], init: state})
	}
	return segs
}

// registerAfter is the register's state after o, when o fixes it: a Get that
// saw the fence, or an accepted Put. Writes are identified by their id, so
// that two writers who wrote the same counter value are told apart.
func registerAfter(o Op) (models.RegisterState, bool) {
	switch {
	case o.Kind == Get && o.FenceOK:
		return models.RegisterState{Write: o.ID, Fence: o.Fence}, true
	case o.Kind == Put && o.Outcome == OK:
		return models.RegisterState{Write: o.ID, Fence: o.Token}, true
	}
	return models.RegisterState{}, false
}

// registerOp turns o into an operation on the fenced register of
// internal/models, the model fencetest.Linearizable checks stores against.
func registerOp(o Op) porcupine.Operation {
	in := models.RegisterInput{Token: o.Token}
	out := models.RegisterOutput{Fence: o.Fence, FenceKnown: o.FenceOK}
	switch o.Kind {
	case Get:
		in.Kind, out.Outcome, out.Write = models.Get, models.OK, o.ID
		if o.ID == 0 {
			out.Outcome = models.NotFound
		}
	case Put:
		in.Kind, in.Write = models.Put, o.ID
	case Advance:
		in.Kind = models.Advance
	}
	if o.Kind != Get {
		out.Outcome = o.Outcome
	}
	return porcupine.Operation{ClientId: o.Worker, Input: in, Output: out, Call: o.Call, Return: o.Return}
}

// checkSegments runs porcupine on every segment of every group, each with
// its own time limit, and sums up.
func checkSegments[S any](groups [][]segment[S], model func(S) porcupine.Model, toOp func(Op) porcupine.Operation, limit time.Duration) Verdict {
	v := Verdict{Result: porcupine.Ok}
	for _, segs := range groups {
		for _, seg := range segs {
			v.Segments++
			v.Ops += len(seg.ops)
			hist := make([]porcupine.Operation, len(seg.ops))
			for i, o := range seg.ops {
				hist[i] = toOp(o)
			}
			switch porcupine.CheckOperationsTimeout(model(seg.init), hist, limit) {
			case porcupine.Illegal:
				if v.Result != porcupine.Illegal {
					v.Result = porcupine.Illegal
					v.Failure = describeFailure(model(seg.init), hist, seg.ops, limit)
				}
			case porcupine.Unknown:
				if v.Result == porcupine.Ok {
					v.Result = porcupine.Unknown
				}
			}
		}
	}
	return v
}

// describeFailure shows the operations around the point where the longest
// linearization porcupine found gets stuck: the first operation, in call
// order, that it could not place.
func describeFailure(model porcupine.Model, hist []porcupine.Operation, ops []Op, limit time.Duration) string {
	_, info := porcupine.CheckOperationsVerbose(model, hist, limit)
	placed := map[int]bool{}
	longest := 0
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
	stuck := 0
	for i := range ops {
		if !placed[i] {
			stuck = i
			break
		}
	}
	from, to := max(stuck-12, 0), min(stuck+8, len(ops))
	s := fmt.Sprintf("  (operations %d to %d of %d; the checker could not place the one marked >)\n", from, to-1, len(ops))
	for i := from; i < to; i++ {
		mark := "  "
		if i == stuck {
			mark = "> "
		}
		s += "  " + mark + ops[i].String() + "\n"
	}
	return s
}

// checkRegister checks every key's reads and writes against the fenced
// register.
func checkRegister(byKey [][]Op, limit time.Duration) Verdict {
	groups := make([][]segment[models.RegisterState], 0, len(byKey))
	for _, ops := range byKey {
		groups = append(groups, split(ops, models.RegisterState{}, registerAfter))
	}
	return checkSegments(groups, models.Register, registerOp, limit)
}

// checkTokens checks every lock's acquisitions against the token model
// shared with lock/drivertest (models.Tokens). A segment is cut after an
// acquisition that overlaps no other, so the next one starts from its token
// and owner.
func checkTokens(byLock [][]Op, limit time.Duration) Verdict {
	groups := make([][]segment[models.TokenState], 0, len(byLock))
	for _, ops := range byLock {
		groups = append(groups, split(ops, models.TokenState{}, func(o Op) (models.TokenState, bool) {
			return models.TokenState{Last: o.Token, Holder: o.Owner}, true
		}))
	}
	toOp := func(o Op) porcupine.Operation {
		return porcupine.Operation{
			ClientId: o.Worker,
			Input:    models.TokenInput{Name: strconv.Itoa(o.Key), Op: models.LockAcquire, Owner: o.Owner},
			Output:   models.TokenOutput{Outcome: models.LockOK, Token: o.Token},
			Call:     o.Call,
			Return:   o.Return,
		}
	}
	return checkSegments(groups, models.Tokens, toOp, limit)
}

// staleAccepted counts writes (Put or Advance) that were accepted although
// a write with a higher lease token had been accepted on the same key and
// had returned before they were called: writes that fencing exists to
// refuse. ops are one key's, in any order.
func staleAccepted(ops []Op) (n int, first string) {
	var ok []Op
	for _, o := range ops {
		if (o.Kind == Put || o.Kind == Advance) && o.Outcome == OK {
			ok = append(ok, o)
		}
	}
	return newerBefore(ok, func(newer, o Op) bool { return newer.Token > o.Token })
}

// tokenRegressions counts acquisitions whose token is not above that of an
// acquisition that returned before they were called, unless it is the same
// owner's (a retried attempt gets its own token back). ops are one lock's.
func tokenRegressions(ops []Op) (n int, first string) {
	return newerBefore(ops, func(newer, o Op) bool {
		return newer.Token > o.Token || (newer.Token == o.Token && newer.Owner != o.Owner)
	})
}

// newerBefore counts operations o for which some operation p that returned
// before o was called has a token for which bad(p, o) holds, checking only
// the highest such token (bad must be monotonic in p.Token).
func newerBefore(ops []Op, bad func(p, o Op) bool) (n int, first string) {
	byCall := slices.Clone(ops)
	slices.SortFunc(byCall, func(a, b Op) int { return cmp64(a.Call, b.Call) })
	byReturn := slices.Clone(ops)
	slices.SortFunc(byReturn, func(a, b Op) int { return cmp64(a.Return, b.Return) })
	j := 0
	var best *Op
	for _, o := range byCall {
		for j < len(byReturn) && byReturn[j].Return < o.Call {
			if best == nil || byReturn[j].Token > best.Token {
				p := byReturn[j]
				best = &p
			}
			j++
		}
		if best != nil && bad(*best, o) {
			if n == 0 {
				first = fmt.Sprintf("%v after %v", o, *best)
			}
			n++
		}
	}
	return n, first
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
