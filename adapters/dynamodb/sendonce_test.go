package dynamodb_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// lostReply is a transport that, once armed, lets one write request of the
// named operation reach the server and be executed, runs between (another
// client's write landing before the reply would have come back), and then
// loses the reply: the connection is reset, an error the SDK's standard
// retryer retries.
type lostReply struct {
	base    http.RoundTripper
	op      string
	armed   atomic.Bool
	between func()
}

func (l *lostReply) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+l.op) || !l.armed.CompareAndSwap(true, false) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	l.between()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// A Store write whose reply is lost is not sent again by the SDK: had it
// been, the copy would meet the fence that a newer holder raised meanwhile
// and be refused, and the caller would hear ErrStale ("nothing changed")
// about a write that landed. The caller hears an error that leaves the
// outcome open instead, and the store holds the newer holder's write.
// (Found by the soak: a semaphore counter step that no increment
// explained.)
func TestLostReplyIsNotSentAgain(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	newer := storeWithPrefix(t, srv, prefix)
	for _, tc := range []struct {
		op    string
		write func(s *fenceddb.Store, key string) error
	}{
		{"PutItem", func(s *fenceddb.Store, key string) error { return s.Put(ctx, key, 5, []byte("five")) }},
		{"UpdateItem", func(s *fenceddb.Store, key string) error { return s.Advance(ctx, key, 5) }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			key := "k-" + tc.op
			tr := &lostReply{base: http.DefaultTransport.(*http.Transport).Clone(), op: tc.op}
			tr.between = func() {
				if err := newer.Put(ctx, key, 6, []byte("six")); err != nil {
					t.Errorf("the newer holder's Put: %v", err)
				}
			}
			client := srv.Client(func(o *awsddb.Options) { o.HTTPClient = &http.Client{Transport: tr} })
			s, err := fenceddb.NewStore(client, testTable, &fenceddb.StoreOptions{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			tr.armed.Store(true)
			err = tc.write(s, key)
			if err == nil || errors.Is(err, fence.ErrStale) {
				t.Fatalf("write whose reply was lost: %v, want an error that leaves the outcome open (not ErrStale: the write landed)", err)
			}
			if tr.armed.Load() {
				t.Fatal("the reply was never lost: the test did not run")
			}
			rec, err := newer.Get(ctx, key)
			if err != nil || rec.Fence != 6 || string(rec.Value) != "six" {
				t.Fatalf("after: %+v, %v; want the newer holder's write at fence 6", rec, err)
			}
		})
	}
}
