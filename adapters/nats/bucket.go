package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers the package writes, and those of the server and the KV layer that
// it reads.
const (
	// fenceHeader carries a Store record's fence, in decimal.
	fenceHeader = "Fencekit-Fence"
	// tokenHeader carries a lease's token on the messages that renew it;
	// the message that takes a lock carries none, its own sequence being
	// the token.
	tokenHeader = "Fencekit-Token"
	// kvOpHeader marks a KV delete ("DEL") or purge ("PURGE").
	kvOpHeader = "KV-Operation"
	// markerHeader marks a message the server wrote when it removed a key
	// (a limit marker of a bucket with LimitMarkerTTL).
	markerHeader = "Nats-Marker-Reason"
	// ttlHeader is a message's per-message TTL.
	ttlHeader = jetstream.MsgTTLHeader
)

// RequestTimeout bounds each request to the server, whatever the caller's
// deadline: a JetStream API request that no server answers (the stream's
// leader died and the next one is not elected yet) gets no error, only
// silence, and would otherwise wait for the caller's context to end. A
// request cut short this way fails with a transient error whose outcome is
// unknown (a write may have landed), so that a caller retries it. A
// request still waiting when the stream elects a leader ends then, in the
// same way, without waiting for RequestTimeout (see elections).
const RequestTimeout = 5 * time.Second

// errNoReply marks a request that RequestTimeout cut short.
var errNoReply = errors.New("no reply from the server within " + RequestTimeout.String())

// bucket is the plumbing that a Store and a Backend share: the KV bucket's
// stream, leader reads of a key's last message, and conditional writes.
type bucket struct {
	js      jetstream.JetStream
	stream  string // KV_<name>
	subject string // $KV.<name>.
	api     string // the JetStream API prefix, $JS.API. by default
	prefix  string // the key prefix, without the trailing dot
	// written is the highest revision a write through this bucket got
	// acknowledged: a replica that answers a read (lastMany) with an older
	// state has not applied it yet.
	written atomic.Uint64
	// elections ends the requests in flight when the stream elects a
	// leader (see elections).
	elections elections
}

// wrote notes that a write got revision seq.
func (b *bucket) wrote(seq uint64) {
	for {
		old := b.written.Load()
		if seq <= old || b.written.CompareAndSwap(old, seq) {
			return
		}
	}
}

// openBucket looks the bucket up and returns its stream's configuration.
func openBucket(ctx context.Context, js jetstream.JetStream, name, prefix string) (*bucket, *jetstream.StreamConfig, error) {
	if js == nil {
		return nil, nil, fmt.Errorf("%w: nil JetStream", ErrBucketConfig)
	}
	p, err := checkPrefix(prefix)
	if err != nil {
		return nil, nil, err
	}
	if name == "" || strings.ContainsAny(name, ". *>\t\r\n") {
		return nil, nil, fmt.Errorf("%w: invalid bucket name %q", ErrBucketConfig, name)
	}
	b := &bucket{js: js, stream: "KV_" + name, subject: "$KV." + name + ".", api: js.Options().APIPrefix, prefix: p}
	if b.api == "" {
		b.api = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(b.api, ".") {
		b.api += "."
	}
	sctx, cancel := b.withTimeout(ctx)
	defer cancel()
	s, err := js.Stream(sctx, b.stream)
	err = noReply(sctx, err)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, fmt.Errorf("%w: bucket %q does not exist", ErrBucketConfig, name)
	}
	if err != nil {
		return nil, nil, opError(ctx, "open bucket", name, err)
	}
	cfg := s.CachedInfo().Config
	b.elections.follow(js.Conn(), b.stream)
	if cfg.MaxAge != 0 {
		return nil, nil, fmt.Errorf("%w: bucket %q has a TTL (MaxAge %v), which would remove records the package keeps", ErrBucketConfig, name, cfg.MaxAge)
	}
	if cfg.Discard == jetstream.DiscardOld && (cfg.MaxMsgs > 0 || cfg.MaxBytes > 0) {
		// KV buckets discard new writes when full (an error the caller
		// sees); discarding old ones would drop other keys' records.
		return nil, nil, fmt.Errorf("%w: bucket %q has a size limit with discard old, which would drop records the package keeps", ErrBucketConfig, name)
	}
	return b, &cfg, nil
}

// key is the KV key of name under kind ("lock", "fence").
func (b *bucket) key(kind, name string) string {
	return b.prefix + "." + kind + "." + encodeName(name)
}

// withTimeout bounds ctx by RequestTimeout (see there).
func (b *bucket) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, RequestTimeout, errNoReply)
}

// noReply reports err as errNoReply when ctx (from withTimeout) ended by
// RequestTimeout rather than by its parent.
func noReply(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errNoReply) {
		// Not wrapped: the inner deadline is not the caller's, and an
		// error matching context.DeadlineExceeded is not retried.
		return fmt.Errorf("%w (%v)", errNoReply, err)
	}
	return err
}

// record is the last message of a key.
type record struct {
	seq    uint64
	header natsgo.Header
	data   []byte
	time   time.Time // the server's clock when it stored the message
}

// removed reports whether the message says the key holds nothing: a KV
// delete or purge, or a marker the server left when it expired the key.
func (r *record) removed() bool {
	return r.header.Get(kvOpHeader) != "" || r.header.Get(markerHeader) != ""
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// last reads key's last message from the stream's leader, or nil when the
// key has none. It does not use a direct get, which any replica may answer
// from a state that lags the leader's: a read must see every write
// acknowledged before it.
func (b *bucket) last(ctx context.Context, key string) (*record, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{b.subject + key})
	if err != nil {
		return nil, err
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	var msg *natsgo.Msg
	err = untilConnLost(ctx, b.js.Conn(), b.elections.next(), func(ctx context.Context) (err error) {
		msg, err = b.js.Conn().RequestWithContext(ctx, b.api+"STREAM.MSG.GET."+b.stream, req)
		return err
	})
	err = noReply(ctx, err)
	if err != nil {
		return nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("decode the reply to a read: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == codeMsgNotFound {
			return nil, nil
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, errors.New("a read's reply holds no message")
	}
	r := &record{seq: resp.Message.Sequence, data: resp.Message.Data, time: resp.Message.Time, header: natsgo.Header{}}
	if len(resp.Message.Header) > 0 {
		if r.header, err = natsgo.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("decode the headers of a read: %w", err)
		}
	}
	return r, nil
}

// write publishes data and header under key if key's last message is still
// the one with sequence after (0: key holds no message), with a per-message
// TTL when ttl > 0, and returns the new message's sequence: the key's new
// revision. A refusal because the key moved on matches isConflict.
func (b *bucket) write(ctx context.Context, key string, after uint64, header natsgo.Header, data []byte, ttl time.Duration) (uint64, error) {
	if header == nil {
		header = natsgo.Header{}
	}
	m := &natsgo.Msg{Subject: b.subject + key, Header: header, Data: data}
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(after), jetstream.WithExpectStream(b.stream)}
	if ttl > 0 {
		// The header's value is whole seconds ("5s"): the server truncates
		// anything finer, so callers round up first.
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	var ack *jetstream.PubAck
	err := untilConnLost(ctx, b.js.Conn(), b.elections.next(), func(ctx context.Context) (err error) {
		ack, err = b.js.PublishMsg(ctx, m, opts...)
		return err
	})
	err = noReply(ctx, err)
	if err != nil {
		return 0, err
	}
	b.wrote(ack.Sequence)
	return ack.Sequence, nil
}

// parseUint reads a decimal header value in 1..2^63-1.
func parseToken(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0 && strconv.FormatInt(n, 10) == s
}
