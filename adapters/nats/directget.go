package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// maxLastMany is the most subjects one multi-last read returns: the
// server refuses a request that matches more (413 Too Many Results).
const maxLastMany = 1024

// errTooManySubjects is a multi-last read that matched more than
// maxLastMany subjects.
var errTooManySubjects = fmt.Errorf("more than %d keys match one read", maxLastMany)

// subjectRecord is the last message of one subject, as a multi-last read
// returns it.
type subjectRecord struct {
	subject string // the full subject, "$KV.<bucket>.<key>"
	rec     *record
}

// maxStaleReads is how many times lastMany asks again when the replica
// that answered had not applied a write this bucket got acknowledged.
const maxStaleReads = 2

// lastMany reads the last message of every subject that one of subjects
// matches (they may hold wildcards) in one request: a JetStream direct get
// with multi_last, which the stream answers with one reply per subject and
// an end-of-batch status. Unlike last, any replica of the stream may answer,
// from a state that can lag the leader's by the writes it has not applied
// yet: callers use it where a stale answer costs fairness or an extra round
// trip, never where it could let a write through (every write still expects
// a revision, which the leader checks). An answer older than the last write
// this bucket got acknowledged (by the replica's last revision, which the
// end of the batch reports) is asked again, up to maxStaleReads times; fresh
// reports whether the answer kept is at least that recent.
func (b *bucket) lastMany(ctx context.Context, subjects []string) (out []subjectRecord, fresh bool, err error) {
	for range maxStaleReads + 1 {
		var upTo uint64
		out, upTo, err = b.lastManyOnce(ctx, subjects)
		if err != nil || upTo >= b.written.Load() {
			return out, err == nil, err
		}
	}
	return out, false, nil
}

// lastManyOnce is one multi-last read, and the last revision of the
// replica that answered (0 when it reports none: nothing matched).
func (b *bucket) lastManyOnce(ctx context.Context, subjects []string) ([]subjectRecord, uint64, error) {
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
	}{subjects})
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	nc := b.js.Conn()
	var (
		out  []subjectRecord
		upTo uint64
	)
	err = untilConnLost(ctx, nc, b.elections.next(), func(ctx context.Context) error {
		out, upTo = out[:0], 0
		// An asynchronous subscription: a synchronous one allocates a
		// channel of SubChanLen (64k) messages for every read.
		replies := make(chan *natsgo.Msg, 1)
		var (
			mu   sync.Mutex
			msgs []*natsgo.Msg
		)
		inbox := nc.NewInbox()
		sub, err := nc.Subscribe(inbox, func(m *natsgo.Msg) {
			if m.Header.Get("Status") != "" && len(m.Data) == 0 {
				replies <- m // the last reply: handlers run one at a time
				return
			}
			mu.Lock()
			msgs = append(msgs, m)
			mu.Unlock()
		})
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.PublishRequest(b.api+"DIRECT.GET."+b.stream, inbox, req); err != nil {
			return err
		}
		var end *natsgo.Msg
		select {
		case end = <-replies:
		case <-ctx.Done():
			return ctx.Err()
		}
		switch status := end.Header.Get("Status"); status {
		case "204": // end of batch
			upTo, _ = strconv.ParseUint(end.Header.Get("Nats-UpTo-Sequence"), 10, 64)
		case "404": // no subject matched
			upTo = b.written.Load() // nothing to judge it by
		case "413":
			return errTooManySubjects
		case "503":
			return natsgo.ErrNoResponders
		default:
			return fmt.Errorf("a multi-last read was answered %s %s", status, end.Header.Get("Description"))
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			r, err := directRecord(m)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err = noReply(ctx, err); err != nil {
		return nil, 0, err
	}
	return out, upTo, nil
}

// directRecord decodes one reply of a direct get: the stored message's
// headers, with the server's Nats-Subject, Nats-Sequence and
// Nats-Time-Stamp added.
func directRecord(msg *natsgo.Msg) (subjectRecord, error) {
	h := msg.Header
	seq, err := strconv.ParseUint(h.Get("Nats-Sequence"), 10, 64)
	if err != nil || seq == 0 {
		return subjectRecord{}, fmt.Errorf("a direct get's reply has sequence %q", h.Get("Nats-Sequence"))
	}
	subj := h.Get("Nats-Subject")
	if subj == "" {
		return subjectRecord{}, errors.New("a direct get's reply names no subject")
	}
	ts, err := time.Parse(time.RFC3339Nano, h.Get("Nats-Time-Stamp"))
	if err != nil {
		return subjectRecord{}, fmt.Errorf("a direct get's reply has time %q", h.Get("Nats-Time-Stamp"))
	}
	return subjectRecord{subject: subj, rec: &record{seq: seq, header: h, data: msg.Data, time: ts}}, nil
}
