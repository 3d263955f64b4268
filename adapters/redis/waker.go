package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock"
)

// subscriber is the part of go-redis that pub/sub needs: every go-redis
// client kind has it (a cluster client subscribes on one node, and PUBLISH
// reaches every node).
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
}

// subscriptionLinger is how long the wake-up channel stays subscribed after
// the last local waiter left: a lock that is contended now is likely to be
// contended again in a moment, and subscribing anew costs a round trip.
const subscriptionLinger = 30 * time.Second

// waker delivers the wake-ups that Release publishes to the waiters of this
// Backend. Each Backend has a channel of its own, "<prefix>:wake:<random>",
// which its waiters' queue entries name, so a wake-up reaches only the
// process of the waiter it is for, however many processes wait: one pub/sub
// connection per Backend, subscribed while someone here waits, each message
// ("lease key NUL owner") handed to that waiter's mailbox.
type waker struct {
	sub     subscriber // nil: the client cannot subscribe; waiters sleep
	channel string
	linger  time.Duration // subscriptionLinger; shorter in tests

	mu        sync.Mutex
	ps        *goredis.PubSub          // nil while unsubscribed
	boxes     map[string]chan struct{} // by message; buffered (1): a wake-up waits for its reader
	sent      bool                     // SUBSCRIBE was sent on ps
	ready     chan struct{}            // closed when the server confirmed it
	confirmed bool
	idle      *time.Timer // unsubscribes once nobody has waited for subscriptionLinger
}

func newWaker(c Client, prefix string) *waker {
	id, err := lock.NewOwner() // 128 random bits, in hex
	if err != nil {
		id = "0" // no wake-ups can be addressed: waiters sleep to their renewal
	}
	w := &waker{channel: prefix + ":wake:" + id, linger: subscriptionLinger, boxes: map[string]chan struct{}{}, ready: make(chan struct{})}
	if s, ok := c.(subscriber); ok && err == nil {
		w.sub = s
	}
	return w
}

// mailbox names owner's wake-ups for the lock whose lease key is leaseKey,
// as the scripts write them.
func mailbox(leaseKey, owner string) string { return leaseKey + "\x00" + owner }

// open makes sure the mailbox exists.
func (w *waker) open(box string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.boxes[box]; ok {
		return
	}
	w.boxes[box] = wake.NewBox()
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
}

// close removes the mailbox, if any; the subscription lingers.
func (w *waker) close(box string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.boxes[box]; !ok {
		return
	}
	delete(w.boxes, box)
	if len(w.boxes) == 0 && w.ps != nil && w.idle == nil {
		w.idle = time.AfterFunc(w.linger, w.unsubscribeIdle)
	}
}

// await waits for a wake-up in box, at most max. The first wait subscribes
// and returns once the server confirmed it: a wake-up published before then
// was missed, so the caller asks again instead of waiting for it.
func (w *waker) await(ctx context.Context, box string, max time.Duration) error {
	w.mu.Lock()
	ch := w.boxes[box]
	if ch == nil || w.sub == nil {
		w.mu.Unlock()
		return wake.Wait(ctx, nil, max) // nothing can wake it: wait for the renewal
	}
	w.mu.Unlock()
	ready, confirmed, err := w.subscribe(ctx)
	if err != nil {
		return err
	}
	if !confirmed {
		return wake.Wait(ctx, ready, max)
	}
	return wake.Wait(ctx, ch, max)
}

// subscribe sends SUBSCRIBE unless it was sent already, and returns the
// channel that is closed once the server confirmed it, and whether it has
// been.
func (w *waker) subscribe(ctx context.Context) (ready chan struct{}, confirmed bool, err error) {
	w.mu.Lock()
	send := !w.sent
	if send {
		w.sent = true
		if w.ps == nil {
			w.ps = w.sub.Subscribe(context.WithoutCancel(ctx))
			go w.dispatch(w.ps, w.ps.ChannelWithSubscriptions())
		}
	}
	ps := w.ps
	ready, confirmed = w.ready, w.confirmed
	w.mu.Unlock()

	if send {
		if err := ps.Subscribe(ctx, w.channel); err != nil {
			w.mu.Lock()
			w.sent = false
			w.mu.Unlock()
			return nil, false, err
		}
	}
	return ready, confirmed, nil
}

// isConfirmed reports whether the channel is subscribed, confirmed by the
// server: then every wake-up published from now on reaches the mailboxes
// that are open (an open mailbox keeps the subscription).
func (w *waker) isConfirmed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.confirmed
}

// subscribed subscribes, if need be, and waits until the server confirmed
// it or ctx ends. It reports false when the client cannot subscribe.
func (w *waker) subscribed(ctx context.Context) (bool, error) {
	if w.sub == nil {
		return false, nil
	}
	ready, confirmed, err := w.subscribe(ctx)
	if err != nil || confirmed {
		return confirmed, err
	}
	select {
	case <-ready:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// dispatch hands each message to its mailbox and marks the subscription
// confirmed, until ps is closed. go-redis reconnects and resubscribes by
// itself; a wake-up published while it does is lost, and the waiter's
// renewal serves it instead.
func (w *waker) dispatch(ps *goredis.PubSub, msgs <-chan any) {
	for m := range msgs {
		w.mu.Lock()
		if w.ps == ps {
			switch m := m.(type) {
			case *goredis.Subscription:
				if m.Kind == "subscribe" && !w.confirmed {
					w.confirmed = true
					close(w.ready)
				}
			case *goredis.Message:
				if box := w.boxes[m.Payload]; box != nil {
					wake.Post(box)
				}
			}
		}
		w.mu.Unlock()
	}
}

// unsubscribeIdle closes the pub/sub connection if nobody waited for
// subscriptionLinger.
func (w *waker) unsubscribeIdle() {
	w.mu.Lock()
	if len(w.boxes) > 0 || w.ps == nil {
		w.mu.Unlock()
		return
	}
	ps := w.ps
	w.ps, w.sent, w.confirmed, w.ready, w.idle = nil, false, false, make(chan struct{}), nil
	w.mu.Unlock()
	_ = ps.Close()
}
