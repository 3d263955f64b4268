package models

import (
	"fmt"
	"hash/fnv"

	"github.com/anishathalye/porcupine"
)

// LockOp is a lock operation, as the token model sees it.
type LockOp uint8

// The lock operations the token model knows.
const (
	LockAcquire LockOp = iota + 1 // driver.Backend.Acquire of a lock: a new token, or the holder's own
	LockExtend                    // driver.Backend.Extend
	LockRelease                   // driver.Backend.Release
)

// String names the operation.
func (k LockOp) String() string {
	switch k {
	case LockAcquire:
		return "acquire"
	case LockExtend:
		return "extend"
	case LockRelease:
		return "release"
	}
	return fmt.Sprintf("LockOp(%d)", uint8(k))
}

// LockOutcome is how a lock operation ended, as its caller saw it.
type LockOutcome uint8

// The outcomes.
const (
	// LockOK: Acquire returned a token, Extend or Release succeeded.
	LockOK LockOutcome = iota + 1
	// LockRefused: an error matching lock.ErrHeld (Acquire) or
	// lock.ErrNotHeld (Extend, Release). Nothing changed.
	LockRefused
	// LockUnknown: any other error. The operation may or may not have taken
	// effect, and an Acquire's token, if one was minted, is not known.
	LockUnknown
)

// String names the outcome.
func (o LockOutcome) String() string {
	switch o {
	case LockOK:
		return "ok"
	case LockRefused:
		return "refused"
	case LockUnknown:
		return "unknown"
	}
	return fmt.Sprintf("LockOutcome(%d)", uint8(o))
}

// TokenInput is the input of one operation on the token model.
type TokenInput struct {
	Name  string // the lock name; the model partitions by it
	Op    LockOp
	Owner string
}

// TokenOutput is what the operation returned.
type TokenOutput struct {
	Outcome LockOutcome
	Token   int64 // Acquire with LockOK: the token returned
}

// TokenState is one lock's state as far as tokens tell: the highest token
// returned so far, and the owner that may hold the lease with it.
type TokenState struct {
	// Last is the highest token any acquire returned.
	Last int64
	// Holder is the owner whose lease may still be live; "" after it was
	// released or refused as not held. Expiry is not modelled (the model
	// has no clock), so a Holder may have expired unseen: that only ever
	// allows more, never less.
	Holder string
	// Hidden means Holder's acquire had an unknown outcome and may have
	// minted a token above Last that nobody saw.
	Hidden bool
}

// Tokens is the token-monotonicity model of lock backends, partitioned by
// lock name, from the state init (the zero value for a history that starts
// with the lock never used). Per name:
//
//   - an acquire that returns a token returns either one above every token
//     returned before it in the linearization (so above every token an
//     acquire that completed before it was invoked returned), or, when its
//     owner holds the lease, that lease's own token;
//   - so distinct owners never get equal tokens, and a token is never
//     handed out again once a newer one was, or once its lease was
//     released;
//   - Extend and Release succeed only for the owner the model says may
//     hold the lease: after another owner's acquire returned, the old
//     holder's Extend and Release must be refused.
//
// Gaps between tokens are legal, and so are tokens shared across names (the
// model sees one name at a time). Refused operations change nothing. An
// operation with an unknown outcome may or may not have taken effect; the
// model tries both. An unknown acquire may have minted a token that no one
// saw: that makes its owner the possible holder and constrains later tokens
// only through the ones actually returned, which is all that can be checked
// from outside. Without a clock the model cannot tell an expired lease from
// a live one, so it never demands that an acquire be refused or that an
// expired lease's owner be refused; the timed checks of lock/drivertest
// cover those.
func Tokens(init TokenState) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byName := map[string]int{}
			var parts [][]porcupine.Operation
			for _, op := range history {
				name := op.Input.(TokenInput).Name
				i, ok := byName[name]
				if !ok {
					i = len(parts)
					byName[name] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], op)
			}
			return parts
		},
		Init: func() []any { return []any{init} },
		Step: func(state, input, output any) []any {
			return tokenStep(state.(TokenState), input.(TokenInput), output.(TokenOutput))
		},
		Hash: func(state any) uint64 {
			s := state.(TokenState)
			h := fnv.New64a()
			_, _ = h.Write([]byte(s.Holder))
			v := h.Sum64() ^ uint64(s.Last)*0x9e3779b97f4a7c15
			if s.Hidden {
				v = ^v
			}
			return v
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(TokenInput), output.(TokenOutput)
			if in.Op == LockAcquire && out.Outcome == LockOK {
				return fmt.Sprintf("%s(%q, owner %.8s) -> token %d", in.Op, in.Name, in.Owner, out.Token)
			}
			return fmt.Sprintf("%s(%q, owner %.8s) -> %s", in.Op, in.Name, in.Owner, out.Outcome)
		},
		DescribeState: func(state any) string {
			s := state.(TokenState)
			return fmt.Sprintf("last token %d, holder %.8q, hidden %v", s.Last, s.Holder, s.Hidden)
		},
	}
	return nm.ToModel()
}

// tokenStep returns the states the lock may be in after the operation, none
// when the operation cannot have returned out from state s.
func tokenStep(s TokenState, in TokenInput, out TokenOutput) []any {
	freed := TokenState{Last: s.Last, Hidden: s.Hidden}
	switch in.Op {
	case LockAcquire:
		switch out.Outcome {
		case LockOK:
			switch {
			case out.Token > s.Last:
				return []any{TokenState{Last: out.Token, Holder: in.Owner}}
			case out.Token == s.Last && s.Holder == in.Owner && !s.Hidden && out.Token > 0:
				return []any{s}
			}
			return nil
		case LockRefused:
			return []any{s}
		case LockUnknown:
			return []any{s, TokenState{Last: s.Last, Holder: in.Owner, Hidden: true}}
		}
	case LockExtend, LockRelease:
		mine := in.Owner != "" && s.Holder == in.Owner
		switch out.Outcome {
		case LockOK:
			switch {
			case !mine:
				return nil
			case in.Op == LockRelease:
				return []any{freed}
			}
			return []any{s}
		case LockRefused:
			if mine {
				return []any{freed} // it expired
			}
			return []any{s}
		case LockUnknown:
			if mine && in.Op == LockRelease {
				return []any{s, freed}
			}
			return []any{s}
		}
	}
	return nil
}
