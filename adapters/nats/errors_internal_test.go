package nats

import (
	"errors"
	"fmt"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/lock/driver"
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
		if got := driver.Retryable(opError(t.Context(), "put", "k", c.err)); got != c.transient {
			t.Errorf("Retryable(opError(%v)) = %v", c.err, got)
		}
	}
}

// TestReadBehind: Inspect takes a multi-last read of a lock and its line
// only when it is at least as recent as the leader's last revision, which
// the stream info sent with it reports, and as this Backend's own writes;
// a read that matched nothing only when the leader has no message on the
// lock key either. Otherwise it asks again, and then reads the lock key on
// the leader.
func TestReadBehind(t *testing.T) {
	const lk = "$KV.b.p.lock.eA"
	leader := func(last uint64, onLock uint64) streamInfo {
		var si streamInfo
		si.State.LastSeq = last
		if onLock > 0 {
			si.State.Subjects = map[string]uint64{lk: onLock}
		}
		return si
	}
	for _, c := range []struct {
		what    string
		matched bool
		upTo    uint64
		leader  streamInfo
		written uint64
		behind  bool
	}{
		{"as recent as the leader", true, 10, leader(10, 1), 0, false},
		{"more recent than the leader", true, 11, leader(10, 1), 0, false},
		{"older than the leader", true, 9, leader(10, 1), 0, true},
		{"older than this Backend's own write", true, 10, leader(10, 1), 12, true},
		{"nothing matched, nothing on the leader", false, 0, leader(10, 0), 0, false},
		{"nothing matched, the lock key has a message on the leader", false, 0, leader(10, 1), 0, true},
	} {
		if got := readBehind(c.matched, c.upTo, c.leader, lk, c.written); got != c.behind {
			t.Errorf("%s: readBehind = %v; want %v", c.what, got, c.behind)
		}
	}
}
