package models

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Kind is the method of fence.Store an operation called.
type Kind uint8

// The operations of the fenced register.
const (
	Get Kind = iota + 1
	Put
	Delete
	Advance
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Get:
		return "get"
	case Put:
		return "put"
	case Delete:
		return "delete"
	case Advance:
		return "advance"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Outcome is how an operation ended, as its caller saw it.
type Outcome uint8

// The outcomes.
const (
	// OK: a write was accepted, or a Get found a value.
	OK Outcome = iota + 1
	// Stale: a write was refused with fence.ErrStale; nothing changed.
	Stale
	// NotFound: a Get found no value (fence.ErrNotFound).
	NotFound
	// Unknown: the call failed otherwise (a timeout, a cut connection). A
	// write may or may not have taken effect, at any moment after its call;
	// give it a Return at the end of the history. A Get with an unknown
	// outcome tells nothing and may be left out.
	Unknown
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Stale:
		return "stale"
	case NotFound:
		return "not found"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// RegisterState is one key of a fenced store.
type RegisterState struct {
	// Write is the id of the Put whose value the key holds; 0 when it holds
	// no value (never written, deleted, or only advanced).
	Write int64
	// Fence is the highest token the key has accepted; 0 if none.
	Fence int64
}

// RegisterInput is an operation on the register.
type RegisterInput struct {
	Kind  Kind
	Token int64 // Put, Delete, Advance: the token offered
	Write int64 // Put: the id of this write, unique in the history and not 0
}

// RegisterOutput is what the operation returned.
type RegisterOutput struct {
	Outcome Outcome
	// Write is, for a Get that found a value, the id of the write it read.
	Write int64
	// Fence is, for a Get, the fence it read; for a Stale write, the fence
	// its fence.StaleError reported. Only used when FenceKnown.
	Fence      int64
	FenceKnown bool
}

// Register is the fenced register, starting from init. A write is accepted
// if and only if its token is at least the fence, which then becomes the
// token: Put stores its write, Delete removes the value, Advance keeps it. A
// refused write changes nothing and reports the current fence. A Get returns
// the current write and fence. A write with an Unknown outcome may or may
// not have taken effect.
func Register(init RegisterState) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(state, input, output any) []any {
			return registerStep(state.(RegisterState), input.(RegisterInput), output.(RegisterOutput))
		},
		Hash: func(state any) uint64 {
			s := state.(RegisterState)
			return uint64(s.Write)*0x9e3779b97f4a7c15 ^ uint64(s.Fence)
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(RegisterInput), output.(RegisterOutput)
			switch in.Kind {
			case Get:
				if out.Outcome == OK {
					return fmt.Sprintf("get -> write %d, fence %d", out.Write, out.Fence)
				}
				return fmt.Sprintf("get -> %s, fence %d", out.Outcome, out.Fence)
			case Put:
				return fmt.Sprintf("put(token %d, write %d) -> %s", in.Token, in.Write, describeWrite(out))
			}
			return fmt.Sprintf("%s(token %d) -> %s", in.Kind, in.Token, describeWrite(out))
		},
		DescribeState: func(state any) string {
			s := state.(RegisterState)
			return fmt.Sprintf("write %d, fence %d", s.Write, s.Fence)
		},
	}
	return nm.ToModel()
}

func describeWrite(out RegisterOutput) string {
	if out.Outcome == Stale && out.FenceKnown {
		return fmt.Sprintf("stale (fence %d)", out.Fence)
	}
	return out.Outcome.String()
}

// registerStep returns the states the register may be in after the
// operation, none if it cannot have returned what it did.
func registerStep(s RegisterState, in RegisterInput, out RegisterOutput) []any {
	fenceSeen := !out.FenceKnown || out.Fence == s.Fence
	if in.Kind == Get {
		switch out.Outcome {
		case OK:
			if s.Write != 0 && out.Write == s.Write && fenceSeen {
				return []any{s}
			}
		case NotFound:
			if s.Write == 0 && fenceSeen {
				return []any{s}
			}
		case Unknown:
			return []any{s}
		}
		return nil
	}
	allowed := in.Token >= s.Fence
	next := RegisterState{Write: s.Write, Fence: in.Token}
	switch in.Kind {
	case Put:
		next.Write = in.Write
	case Delete:
		next.Write = 0
	case Advance:
	default:
		return nil
	}
	switch out.Outcome {
	case OK:
		if allowed {
			return []any{next}
		}
	case Stale:
		if !allowed && fenceSeen {
			return []any{s}
		}
	case Unknown:
		if allowed {
			return []any{s, next}
		}
		return []any{s}
	}
	return nil
}
