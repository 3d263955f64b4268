package s3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestFaults runs the fault kit's checks that fit a write of two requests
// (a read, then the conditional PUT) with the store's connections going
// through the fault proxy: a connection cut mid-call, and replies delayed
// past the context's deadline. The kit's lost-reply checks hold every reply
// from the moment the call starts, so the store's read never comes back and
// its PUT never goes out; TestLostReply covers them by losing the PUT's
// reply alone.
func TestFaults(t *testing.T) {
	srv := s3server.Shared(t)
	prefix := testkit.Namespace(t) + "/"
	ran := 0
	for _, c := range fencetest.FaultChecks() {
		if strings.Contains(c.Name, "LostReply") || c.Name == "RetryAfterNewerHolderIsStale" {
			continue
		}
		ran++
		t.Run(c.Name, func(t *testing.T) {
			p := testkit.NewProxy(t, srv.Addr())
			env := fencetest.FaultEnv{
				Store: fences3.NewStore(srv.Client(s3server.WithDial(p.Dial)), srv.Bucket, &fences3.Options{Prefix: prefix}),
				Proxy: p,
				Other: fences3.NewStore(srv.Client(), srv.Bucket, &fences3.Options{Prefix: prefix}),
				NS:    fencetest.Namespace(),
			}
			ctx, cancel := context.WithTimeout(context.Background(), fencetest.FaultTimeout)
			defer cancel()
			if err := c.Run(ctx, env); err != nil {
				t.Fatal(err)
			}
		})
	}
	if ran != 2 {
		t.Fatalf("ran %d of the kit's checks, want 2 (CutMidCallErrsAndRecovers, DelayPastDeadline): the kit changed", ran)
	}
}

// loseReply is an http.RoundTripper that, once armed, sends the next PUT to
// the server, waits for its reply, runs between, and then drops the reply
// and fails the round trip: the write landed, its writer does not know.
type loseReply struct {
	base http.RoundTripper

	mu      sync.Mutex
	armed   bool
	between func() error
	puts    int
}

func (l *loseReply) arm(between func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.between = true, between
}

func (l *loseReply) putCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.puts
}

var errLost = errors.New("test: reply lost")

func (l *loseReply) RoundTrip(req *http.Request) (*http.Response, error) {
	l.mu.Lock()
	lose := false
	if req.Method == http.MethodPut {
		l.puts++
		lose, l.armed = l.armed, false
	}
	between := l.between
	l.mu.Unlock()
	resp, err := l.base.RoundTrip(req)
	if !lose || err != nil {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("lost PUT was refused (%s), so nothing landed", resp.Status)
	}
	if between != nil {
		if err := between(); err != nil {
			return nil, fmt.Errorf("between: %w", err)
		}
	}
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: errLost}
}

// lossy returns a store whose PUT replies l can lose, and an observer store
// on the same prefix over a healthy client.
func lossy(t *testing.T) (store, other *fences3.Store, l *loseReply) {
	srv := s3server.Shared(t)
	prefix := testkit.Namespace(t) + "/"
	l = &loseReply{base: http.DefaultTransport.(*http.Transport).Clone()}
	client := srv.Client(func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: l} })
	return fences3.NewStore(client, srv.Bucket, &fences3.Options{Prefix: prefix}),
		fences3.NewStore(srv.Client(), srv.Bucket, &fences3.Options{Prefix: prefix}), l
}

type writeFn func(ctx context.Context, s fence.Store, key string, token fence.Token) error

var writes = map[string]writeFn{
	"Put": func(ctx context.Context, s fence.Store, k string, tok fence.Token) error {
		return s.Put(ctx, k, tok, []byte("mine"))
	},
	"Delete": func(ctx context.Context, s fence.Store, k string, tok fence.Token) error {
		return s.Delete(ctx, k, tok)
	},
	"Advance": func(ctx context.Context, s fence.Store, k string, tok fence.Token) error {
		return s.Advance(ctx, k, tok)
	},
}

// TestLostReplyNotResent: a write whose PUT reply is lost after the server
// applied it, while a newer holder writes before the loss is noticed, must
// not send its PUT again (which would be refused and reported as stale,
// about a write that landed): it returns an error that is neither ErrStale
// nor ErrInvalid, after exactly one PUT, with the SDK's default retryer on
// the client.
func TestLostReplyNotResent(t *testing.T) {
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			ctx := testkit.Context(t)
			store, other, l := lossy(t)
			if err := other.Put(ctx, "k", 4, []byte("base")); err != nil {
				t.Fatal(err)
			}
			l.arm(func() error { return other.Put(ctx, "k", 6, []byte("newer")) })
			before := l.putCount()
			err := write(ctx, store, "k", 5)
			if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrInvalid) || !errors.Is(err, errLost) {
				t.Fatalf("%s with its reply lost after a newer holder wrote: %v; want the network error (outcome unknown)", name, err)
			}
			if n := l.putCount() - before; n != 1 {
				t.Fatalf("%s sent %d PUTs; want 1 (no resend after an unknown outcome)", name, n)
			}
			rec, err := other.Get(ctx, "k")
			if err != nil || string(rec.Value) != "newer" || rec.Fence != 6 {
				t.Fatalf("after the lost reply: %q at %d (%v); want the newer holder's value at 6", rec.Value, rec.Fence, err)
			}
		})
	}
}

// TestLostReplyRetry: after a write's reply is lost, the caller's retry
// with the same token is accepted (equal tokens are), and a retry after a
// newer holder wrote is refused as stale.
func TestLostReplyRetry(t *testing.T) {
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			ctx := testkit.Context(t)
			store, other, l := lossy(t)
			if err := other.Put(ctx, "k", 4, []byte("base")); err != nil {
				t.Fatal(err)
			}
			l.arm(nil)
			if err := write(ctx, store, "k", 5); !errors.Is(err, errLost) {
				t.Fatalf("%s with its reply lost: %v; want the network error", name, err)
			}
			if err := write(ctx, store, "k", 5); err != nil {
				t.Fatalf("%s retried with the same token: %v; want it accepted", name, err)
			}
			if rec, _ := other.Get(ctx, "k"); rec.Fence != 5 {
				t.Fatalf("fence after the retry is %d, want 5", rec.Fence)
			}
			if err := other.Put(ctx, "k", 6, []byte("newer")); err != nil {
				t.Fatal(err)
			}
			var se *fence.StaleError
			if err := write(ctx, store, "k", 5); !errors.As(err, &se) || se.Fence != 6 {
				t.Fatalf("%s retried after a newer holder wrote: %v; want stale at fence 6", name, err)
			}
		})
	}
}
