package nats

import (
	"errors"
	"fmt"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/lock"
)

// TestServerHasKeyTTL: per-message TTLs came with nats-server 2.11.
func TestServerHasKeyTTL(t *testing.T) {
	for v, want := range map[string]bool{
		"2.9.10": false, "2.10.29": false, "2.11.0": true, "2.11.0-RC.1": true,
		"2.12.1": true, "2.15.2": true, "3.0.0": true, "": false, "x.y": false,
	} {
		if got := serverHasKeyTTL(v); got != want {
			t.Errorf("serverHasKeyTTL(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestErrorClasses: both forms of "wrong last sequence" are conflicts (the
// write did nothing; compare again), the 503 family and a lost reply are
// transient, anything else is permanent.
func TestErrorClasses(t *testing.T) {
	api := func(code int, ec jetstream.ErrorCode) error {
		return fmt.Errorf("publish: %w", &jetstream.APIError{Code: code, ErrorCode: ec})
	}
	for _, c := range []struct {
		err                 error
		conflict, transient bool
	}{
		{api(400, 10071), true, false},
		{api(400, 10164), true, false},
		{api(503, 10008), false, true},
		{api(503, 10163), false, true},
		{api(400, 10166), false, false},
		{natsgo.ErrTimeout, false, true},
		{natsgo.ErrNoResponders, false, true},
		{jetstream.ErrNoStreamResponse, false, true},
		{natsgo.ErrConnectionClosed, false, false},
		{errors.New("other"), false, false},
	} {
		if got := isConflict(c.err); got != c.conflict {
			t.Errorf("isConflict(%v) = %v", c.err, got)
		}
		if got := transient(c.err); got != c.transient {
			t.Errorf("transient(%v) = %v", c.err, got)
		}
		if got := lock.Retryable(opError(t.Context(), "put", "k", c.err)); got != c.transient {
			t.Errorf("Retryable(opError(%v)) = %v", c.err, got)
		}
	}
}
