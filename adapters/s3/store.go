package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencekit/fencekit/fence"
)

// API is the part of the S3 client that Store uses: GetObject and
// PutObject for every call, DeleteObject only for VerifyServer's cleanup.
// *s3.Client from github.com/aws/aws-sdk-go-v2/service/s3 satisfies it.
type API interface {
	DeleteObject(ctx context.Context, in *awss3.DeleteObjectInput, opts ...func(*awss3.Options)) (*awss3.DeleteObjectOutput, error)
	GetObject(ctx context.Context, in *awss3.GetObjectInput, opts ...func(*awss3.Options)) (*awss3.GetObjectOutput, error)
	PutObject(ctx context.Context, in *awss3.PutObjectInput, opts ...func(*awss3.Options)) (*awss3.PutObjectOutput, error)
}

var (
	_ API         = (*awss3.Client)(nil)
	_ fence.Store = (*Store)(nil)
)

// Options tune a Store. A nil *Options, and every zero field, means the
// default.
type Options struct {
	// Prefix starts the name of every object the store writes (default
	// "fencekit/"). It must be valid UTF-8 without NUL bytes and at most
	// 958 bytes long, so that every key's object name fits S3's 1024 bytes.
	Prefix string
	// MaxAttempts bounds how many times one write reads the object and
	// tries its conditional PUT when other writers keep changing the
	// object in between (default 8). Past it the write fails with an error
	// matching ErrContention, having written nothing.
	MaxAttempts int
}

// MaxValueLen is the largest value a Store accepts: S3's limit for one PUT
// (5 GiB) less the object header. Larger values are refused with an error
// matching fence.ErrInvalid. It is an int64 because it exceeds a 32-bit int;
// on a 32-bit platform every value a slice can hold is below it.
const MaxValueLen int64 = 5<<30 - headerLen - keyLenDigits - fence.MaxKeyLen - 1

// maxObjectLen is the size of the largest object a Store writes.
const maxObjectLen = MaxValueLen + headerLen + keyLenDigits + fence.MaxKeyLen + 1

// Metadata keys (x-amz-meta-...) that repeat the header, for people and
// tools that look at an object with a HEAD. The store never reads them:
// some servers (versitygw v1.8.0) return the metadata of one version with
// the ETag of another, so only the body tells the fence (see readHeader).
const (
	metaFence = "fencekit-fence"
	metaKind  = "fencekit-kind"
)

// Store is a fence.Store on an S3-compatible bucket that supports
// conditional writes (If-Match and If-None-Match on PutObject). Each key is
// one object; see docs/s3.md for the layout, the requests each method makes
// and which services are known to be safe.
//
// A write reads the object's fence from its body and the ETag from the same
// response (a ranged GET of the header; a whole GET for Advance, which must
// rewrite the value), compares the token, and writes with If-Match on that
// ETag, or If-None-Match: * when there was no object. The server
// applies the PUT only if nobody wrote in between, so the comparison and the
// write are one atomic step at the server. When somebody did (412 or 409),
// the write reads again and decides again, up to Options.MaxAttempts times.
// A PUT whose outcome is unknown (a network error, a 5xx) is never sent
// again: the error is returned, and the caller may retry with the same
// token.
//
// Call VerifyServer once at startup: it refuses a server that ignores the
// conditional headers, on which every write would be a check-then-write.
//
// A Store is safe for concurrent use.
type Store struct {
	client      API
	bucket      string
	prefix      string
	maxAttempts int
	err         error // bad configuration, reported by every call
}

// NewStore returns a Store on bucket through client. The bucket must exist:
// a call that finds it missing fails with an error matching ErrNoBucket.
// A nil client, an empty bucket or a bad prefix is reported by every method
// as an error matching fence.ErrInvalid.
func NewStore(client API, bucket string, opts *Options) *Store {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "fencekit/"
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	s := &Store{client: client, bucket: bucket, prefix: o.Prefix, maxAttempts: o.MaxAttempts}
	switch {
	case client == nil:
		s.err = fence.Invalid("s3: nil client")
	case bucket == "":
		s.err = fence.Invalid("s3: empty bucket name")
	case len(o.Prefix) > maxPrefix:
		s.err = fence.Invalid("s3: prefix of %d bytes is longer than %d", len(o.Prefix), maxPrefix)
	case !utf8.ValidString(o.Prefix):
		s.err = fence.Invalid("s3: prefix %q is not valid UTF-8", o.Prefix)
	case containsNUL(o.Prefix):
		s.err = fence.Invalid("s3: prefix %q contains a NUL byte", o.Prefix)
	}
	return s
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// ObjectName returns the name of the object that holds key, for operators
// and tools that look at the bucket directly.
func (s *Store) ObjectName(key string) string { return objectName(s.prefix, key) }

// Put writes value under key if token >= the key's fence, and raises the
// fence to token: a ranged GET of the header, then a conditional PUT of the
// header and the value (read in place, not copied). A nil value is stored
// as an empty value.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if int64(len(value)) > MaxValueLen {
		return fence.Invalid("s3: value of %d bytes is longer than %d", len(value), MaxValueLen)
	}
	return s.write(ctx, opPut, key, token, value)
}

// Delete removes key's value if token >= its fence, leaving a tombstone
// object (the header alone) that keeps the fence, so that an older token
// can never re-create the key: a ranged GET of the header, then a
// conditional PUT. Deleting a missing key leaves such a tombstone; deleting
// a tombstone at the same fence sends nothing more.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, opDelete, key, token, nil)
}

// Advance raises key's fence to token if token >= it, keeping the value: a
// GET, then a conditional PUT of the same value with the new header (see
// docs/s3.md for why not a server-side copy). At the same fence it sends
// nothing more; on a missing key it leaves a tombstone.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, opAdvance, key, token, nil)
}

// Get returns key's value and fence with one GET. When the key holds no
// value the error matches fence.ErrNotFound and the Record still carries
// the fence (0 for a key never written). The value is read into one buffer
// of the object's size, which the caller owns.
func (s *Store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	if s.err != nil {
		return fence.Record{}, s.err
	}
	if err := ctx.Err(); err != nil {
		return fence.Record{}, err
	}
	cur, err := s.get(ctx, key, objectName(s.prefix, key))
	switch {
	case err != nil:
		return fence.Record{}, err
	case !cur.exists:
		return fence.Record{}, fmt.Errorf("s3: %q: %w", key, fence.ErrNotFound)
	case cur.kind == kindTomb:
		return fence.Record{Fence: cur.fence}, fmt.Errorf("s3: %q: %w", key, fence.ErrNotFound)
	}
	v := cur.value
	if v == nil {
		v = []byte{}
	}
	return fence.Record{Value: v, Fence: cur.fence}, nil
}

type op int

const (
	opPut op = iota
	opDelete
	opAdvance
)

func (o op) String() string { return [...]string{"put", "delete", "advance"}[o] }

// state is what a read found at an object name.
type state struct {
	exists bool
	etag   string
	kind   byte
	fence  fence.Token
	value  []byte // from a whole GET only
}

// write is the read, compare, conditional-PUT loop behind Put, Delete and
// Advance.
func (s *Store) write(ctx context.Context, o op, key string, token fence.Token, value []byte) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if s.err != nil {
		return s.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	name := objectName(s.prefix, key)
	for attempt := 1; ; attempt++ {
		var (
			cur state
			err error
		)
		if o == opAdvance {
			cur, err = s.get(ctx, key, name)
		} else {
			cur, err = s.readHeader(ctx, key, name)
		}
		if err != nil {
			return err
		}
		if cur.exists && token < cur.fence {
			return fence.Stale(key, token, cur.fence)
		}
		kind, v := byte(kindValue), value
		switch o {
		case opDelete:
			if cur.exists && cur.kind == kindTomb && cur.fence == token {
				return nil // already this tombstone: nothing to change
			}
			kind, v = kindTomb, nil
		case opAdvance:
			if cur.exists && cur.fence == token {
				return nil // the fence is already there
			}
			kind, v = kindTomb, nil
			if cur.exists {
				kind, v = cur.kind, cur.value
			}
		}
		err = s.put(ctx, key, name, cur, kind, token, v)
		if err == nil {
			return nil
		}
		if noBucket(err) {
			return s.noBucketError(o.String(), key, err)
		}
		if !lostRace(err) {
			// Unknown outcome (or a refusal unrelated to the race): the
			// PUT may have been applied, so it is not sent again.
			return fmt.Errorf("s3: %s %q: %w", o, key, err)
		}
		if attempt >= s.maxAttempts {
			return fmt.Errorf("%w: %s %q: the object changed under each of %d attempts (last: %v)", ErrContention, o, key, attempt, err)
		}
		if err := pause(ctx, attempt); err != nil {
			return err
		}
	}
}

// pause waits a random time that grows with attempt, so that writers who
// lost a race to each other do not meet again at once.
func pause(ctx context.Context, attempt int) error {
	ceiling := min(time.Millisecond<<attempt, 100*time.Millisecond)
	t := time.NewTimer(mrand.N(ceiling) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// noResend makes a PUT go out once: the SDK's retryer would send it again
// after a network error or a 5xx, when the first send may have been applied
// (the fence package's rule on unknown outcomes).
func noResend(o *awss3.Options) {
	o.Retryer = aws.NopRetryer{}
	o.RetryMaxAttempts = 0
}

// put writes kind, token and v at name, on the condition that the object is
// still cur.
func (s *Store) put(ctx context.Context, key, name string, cur state, kind byte, token fence.Token, v []byte) error {
	head := header(kind, token)
	if hashed(s.prefix, name) {
		head = append(head, keyHeader(key)...)
	}
	b := newBody(head, v)
	in := &awss3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(name),
		Body:          b,
		ContentLength: aws.Int64(b.size()),
		ContentType:   aws.String("application/octet-stream"),
		Metadata:      map[string]string{metaFence: fenceString(token), metaKind: string(kind)},
	}
	if cur.exists {
		in.IfMatch = aws.String(cur.etag)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := s.client.PutObject(ctx, in, noResend)
	return err
}

// noBucketError reports that op on key found no bucket: permanent, so it is
// never retried as a lost race or read as a missing key.
func (s *Store) noBucketError(op, key string, err error) error {
	return fmt.Errorf("s3: %s %q: %w %q: %w", op, key, ErrNoBucket, s.bucket, err)
}

// readHeader reads the kind and fence of the object at name from the header
// at the start of its body, and the ETag from the same response: one ranged
// GET. The fence and the ETag a write acts on must not come from two
// versions, or the write could compare its token with an older, lower fence
// and then pass an If-Match on the newer ETag. This rests on the server
// never answering a GET with an ETag newer than the body it sends
// (versitygw reads the ETag before it opens the file, gofakes3 answers
// from one stored item; TestReadIsConsistent checks it on the server): an
// ETag older than the body only makes the conditional PUT fail (412), and
// the write reads again. The user metadata is not read: versitygw v1.8.0
// reads it apart from the ETag.
func (s *Store) readHeader(ctx context.Context, key, name string) (state, error) {
	n := headerLen
	if hashed(s.prefix, name) {
		n += len(keyHeader(key))
	}
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(name),
		Range: aws.String(fmt.Sprintf("bytes=0-%d", n-1)),
	})
	if err != nil {
		switch {
		case notFound(err):
			return state{}, nil
		case noBucket(err):
			return state{}, s.noBucketError("get", key, err)
		case httpStatus(err) == http.StatusRequestedRangeNotSatisfiable:
			// An empty object: too short for a header.
			return state{}, fmt.Errorf("s3: %q (object %q): %w: empty object", key, name, ErrCorrupt)
		}
		return state{}, fmt.Errorf("s3: get %q: %w", key, err)
	}
	defer out.Body.Close()
	if out.ETag == nil || *out.ETag == "" {
		return state{}, fmt.Errorf("s3: get %q: the server sent no ETag, which conditional writes need", key)
	}
	// A server that ignores Range sends the whole object: only the header
	// is read.
	data := make([]byte, n)
	got, err := io.ReadFull(out.Body, data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return state{}, fmt.Errorf("s3: get %q: %w", key, err)
	}
	kind, f, _, err := parseHeader(data[:got], hashed(s.prefix, name), key)
	if err != nil {
		return state{}, fmt.Errorf("s3: %q (object %q): %w", key, name, err)
	}
	return state{exists: true, etag: *out.ETag, kind: kind, fence: f}, nil
}

// get reads the whole object at name into one buffer and decodes it.
func (s *Store) get(ctx context.Context, key, name string) (state, error) {
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(name)})
	if err != nil {
		if notFound(err) {
			return state{}, nil
		}
		if noBucket(err) {
			return state{}, s.noBucketError("get", key, err)
		}
		return state{}, fmt.Errorf("s3: get %q: %w", key, err)
	}
	defer out.Body.Close()
	if out.ETag == nil || *out.ETag == "" {
		return state{}, fmt.Errorf("s3: get %q: the server sent no ETag, which conditional writes need", key)
	}
	var data []byte
	n := aws.ToInt64(out.ContentLength)
	if n > math.MaxInt {
		// Only on a 32-bit platform: the object cannot be held in memory.
		return state{}, fmt.Errorf("s3: get %q: the object's %d bytes do not fit in this platform's address space", key, n)
	}
	if n > 0 && n <= maxObjectLen {
		data = make([]byte, n)
		_, err = io.ReadFull(out.Body, data)
	} else {
		data, err = io.ReadAll(out.Body)
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("object ended early: %w", err)
		}
		return state{}, fmt.Errorf("s3: get %q: %w", key, err)
	}
	// The header alone tells the fence; the metadata, which a server may
	// read apart from the body, is not consulted.
	p, err := parseBody(data, hashed(s.prefix, name), key)
	if err != nil {
		return state{}, fmt.Errorf("s3: %q (object %q): %w", key, name, err)
	}
	return state{exists: true, etag: *out.ETag, kind: p.kind, fence: p.fence, value: p.value}, nil
}
