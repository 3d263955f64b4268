package chaos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/internal/models"
)

// Kind is what an operation in a history did.
type Kind uint8

// The operations a history records.
const (
	Acquire Kind = iota + 1 // one Backend.Acquire call (an attempt of lock.Client.Acquire) returned a token, or one name of a set's Acquire call that did
	Advance                 // Store.Advance with the lease's token
	Get                     // Store.Get
	Put                     // Store.Put of an incremented value
	Release                 // one Backend.Release call (its outcome is not needed: only its call time)
)

// String names the kind of operation.
func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Advance:
		return "advance"
	case Get:
		return "get"
	case Put:
		return "put"
	case Release:
		return "release"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Outcome is how an operation ended, as its caller saw it: the outcomes of
// the shared models. A Get records OK, with ID 0 when it found no value.
type Outcome = models.Outcome

// The outcomes a history records.
const (
	OK      = models.OK
	Stale   = models.Stale   // refused with fence.ErrStale: nothing changed
	Unknown = models.Unknown // failed otherwise (timeout, cut connection): it may or may not have taken effect
)

// Op is one operation of a history, with its invocation and response times
// in nanoseconds since the run started. An operation with an Unknown outcome
// gets a Return at the end of the window in which it could still take
// effect, so that the checker considers every point at which it may have
// landed.
type Op struct {
	Kind   Kind
	Worker int
	Key    int    // index of the key, and of the lock that guards it
	Token  int64  // the lease's token (for Acquire: the token it returned)
	Owner  string // Acquire, Release: the owner the call was made for
	Value  int64  // Put: the value written; Get: the value read (0 when absent)
	ID     int64  // Put: the write's id, stored with the value; Get: the id read (0 when absent)
	Fence  int64  // Get: the fence read
	// Transfer runs only: Prev is the id of the write a Put's value was
	// computed from (the one its Get read, 0 for none), Delta what it
	// added to that value, and Transfer the id shared by a transfer's two
	// halves.
	Prev, Delta, Transfer int64
	FenceOK               bool // Get: whether Fence is meaningful for the model
	Outcome               Outcome
	// Call and Return bound the operation itself: for Acquire, the one
	// Backend.Acquire call that returned the token, not the whole retry
	// loop of lock.Client.Acquire around it.
	Call   int64
	Return int64
}

// String renders the operation as the report prints it.
func (o Op) String() string {
	switch o.Kind {
	case Acquire:
		return fmt.Sprintf("w%d acquire(lock %d, owner %.8s) -> token %d [%d, %d]", o.Worker, o.Key, o.Owner, o.Token, o.Call, o.Return)
	case Release:
		return fmt.Sprintf("release(lock %d, owner %.8s) [%d, %d]", o.Key, o.Owner, o.Call, o.Return)
	case Get:
		return fmt.Sprintf("w%d get(key %d) -> %d (id %d, fence %d) [%d, %d]", o.Worker, o.Key, o.Value, o.ID, o.Fence, o.Call, o.Return)
	case Put:
		return fmt.Sprintf("w%d put(key %d, token %d, %d, id %d) -> %s [%d, %d]", o.Worker, o.Key, o.Token, o.Value, o.ID, o.Outcome, o.Call, o.Return)
	}
	return fmt.Sprintf("w%d %s(key %d, token %d) -> %s [%d, %d]", o.Worker, o.Kind, o.Key, o.Token, o.Outcome, o.Call, o.Return)
}

// encodeValue is what a Put stores: the counter and the id of the write, so
// that a read tells which write it sees.
func encodeValue(n, id int64) []byte {
	return []byte(strconv.FormatInt(n, 10) + ":" + strconv.FormatInt(id, 10))
}

// decodeValue parses what encodeValue made.
func decodeValue(b []byte) (n, id int64, err error) {
	ns, ids, ok := strings.Cut(string(b), ":")
	if !ok {
		return 0, 0, fmt.Errorf("chaos: value %q is not counter:id", b)
	}
	if n, err = strconv.ParseInt(ns, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("chaos: value %q: %w", b, err)
	}
	if id, err = strconv.ParseInt(ids, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("chaos: value %q: %w", b, err)
	}
	return n, id, nil
}
