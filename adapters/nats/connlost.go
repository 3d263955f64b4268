package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"

	natsgo "github.com/nats-io/nats.go"
)

// errConnLost marks a request whose connection dropped while it waited for
// its reply. nats.go re-makes the connection by itself and sends what it
// had not sent yet, but a reply lost with the old connection never comes,
// so the request would otherwise wait for its context to end. The outcome
// is unknown (the server may have applied the request), and a retry may
// succeed: the error is transient.
var errConnLost = errors.New("the connection to the server dropped before the reply came")

// errLeaderElected marks a request to the bucket's stream that was still
// waiting for its reply when the stream elected a leader (see elections).
// Its outcome is unknown, as a timed-out request's, and a retry, which the
// new leader serves, may succeed: the error is transient.
var errLeaderElected = errors.New("the stream elected a new leader before the reply came")

// untilConnLost runs fn with a context that also ends when conn leaves the
// connected state, and then returns an error matching errConnLost; or,
// when elected is closed first (the stream elected a leader: see
// elections), one matching errLeaderElected.
func untilConnLost(ctx context.Context, conn *natsgo.Conn, elected <-chan struct{}, fn func(context.Context) error) error {
	ch := conn.StatusChanged(natsgo.DISCONNECTED, natsgo.RECONNECTING, natsgo.CLOSED)
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case _, ok := <-ch:
			if ok {
				cancel(errConnLost)
			}
		case <-elected:
			cancel(errLeaderElected)
		case <-ctx.Done():
		}
	}()
	err := fn(ctx)
	cancel(nil)
	conn.RemoveStatusListener(ch)
	<-done
	if err != nil {
		// Not wrapped: the inner cancellation is not the caller's.
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errConnLost):
			return fmt.Errorf("%w (%v)", errConnLost, err)
		case errors.Is(cause, errLeaderElected):
			return fmt.Errorf("%w (%v)", errLeaderElected, err)
		}
	}
	return err
}

// elections follows the leader elections of a bucket's stream, from the
// advisories the server publishes on each ($JS.EVENT.ADVISORY.STREAM.
// LEADER_ELECTED.<stream>, in the stream's account), so that the requests
// in flight then end at once rather than at RequestTimeout. A request sent
// while the stream has no leader (its leader died, the others have not
// elected one yet) gets no reply, ever: no node serves it, and the leader
// elected later never sees it. Without this, every call that sent one in
// the seconds before an election waited out the rest of RequestTimeout
// after it (5 s), although the stream served again; and a waiter's place
// in line expired meanwhile. A request that the new leader did get is cut
// short too: its outcome is unknown, as after a timeout, and its caller
// asks again. When the advisories cannot be subscribed to (a connection
// whose account does not see them), requests end at RequestTimeout as
// before.
type elections struct {
	mu  sync.Mutex
	ch  chan struct{} // closed at the next election
	sub *natsgo.Subscription
}

// follow subscribes to the stream's leader election advisories; best
// effort (see elections).
func (e *elections) follow(nc *natsgo.Conn, stream string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch == nil {
		e.ch = make(chan struct{})
	}
	if e.sub != nil || nc == nil {
		return
	}
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."+stream, func(*natsgo.Msg) { e.elected() })
	if err == nil {
		e.sub = sub
	}
}

// next returns a channel that is closed at the stream's next leader
// election; nil (never closed) when elections are not followed.
func (e *elections) next() <-chan struct{} {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ch
}

// elected ends the requests waiting for the election.
func (e *elections) elected() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch != nil {
		close(e.ch)
	}
	e.ch = make(chan struct{})
}
