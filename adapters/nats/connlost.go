package nats

import (
	"context"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
)

// errConnLost marks a request whose connection dropped while it waited for
// its reply. nats.go re-makes the connection by itself and sends what it
// had not sent yet, but a reply lost with the old connection never comes,
// so the request would otherwise wait for its context to end. The outcome
// is unknown (the server may have applied the request), and a retry may
// succeed: the error is transient.
var errConnLost = errors.New("the connection to the server dropped before the reply came")

// untilConnLost runs fn with a context that also ends when conn leaves the
// connected state, and then returns an error matching errConnLost.
func untilConnLost(ctx context.Context, conn *natsgo.Conn, fn func(context.Context) error) error {
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
		case <-ctx.Done():
		}
	}()
	err := fn(ctx)
	cancel(nil)
	conn.RemoveStatusListener(ch)
	<-done
	if err != nil && errors.Is(context.Cause(ctx), errConnLost) {
		// Not wrapped: the inner cancellation is not the caller's.
		return fmt.Errorf("%w (%v)", errConnLost, err)
	}
	return err
}
