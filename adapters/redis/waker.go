package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// subscriber is the part of go-redis that pub/sub needs: every go-redis
// client kind has it (a cluster client subscribes on the node of the
// channel's slot, and PUBLISH reaches every node).
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
}

// subscriptionLinger is how long a wake-up channel stays subscribed after
// its last local waiter left: a lock that is contended now is likely to be
// contended again in a moment, and subscribing anew costs a round trip.
const subscriptionLinger = 30 * time.Second

// waker delivers the wake-ups that Release publishes to the waiters of this
// process: one pub/sub connection per Backend, shared by all of its waiters
// and lock names, subscribed to the channels of the names someone here
// waits for, each message handed to the mailbox of the owner it names.
type waker struct {
	sub subscriber // nil: the client cannot subscribe; waiters sleep

	mu       sync.Mutex
	ps       *goredis.PubSub // nil until the first subscription
	channels map[string]*subscription
	boxes    map[mailbox]chan struct{} // buffered (1): a wake-up waits for its reader
}

type mailbox struct{ channel, owner string }

// subscription is one wake-up channel's state.
type subscription struct {
	boxes     int           // open mailboxes on the channel
	sent      bool          // SUBSCRIBE was sent
	ready     chan struct{} // closed when the server confirmed it
	confirmed bool
	idle      *time.Timer // unsubscribes once nobody has waited for subscriptionLinger
}

func newWaker(c Client) *waker {
	w := &waker{channels: map[string]*subscription{}, boxes: map[mailbox]chan struct{}{}}
	if s, ok := c.(subscriber); ok {
		w.sub = s
	}
	return w
}

// open makes sure owner has a mailbox on channel.
func (w *waker) open(channel, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := mailbox{channel, owner}
	if _, ok := w.boxes[k]; ok {
		return
	}
	w.boxes[k] = make(chan struct{}, 1)
	s := w.channels[channel]
	if s == nil {
		s = &subscription{ready: make(chan struct{})}
		w.channels[channel] = s
	}
	s.boxes++
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
}

// close removes owner's mailbox on channel, if any.
func (w *waker) close(channel, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := mailbox{channel, owner}
	if _, ok := w.boxes[k]; !ok {
		return
	}
	delete(w.boxes, k)
	s := w.channels[channel]
	s.boxes--
	if s.boxes > 0 {
		return
	}
	if !s.sent {
		delete(w.channels, channel)
		return
	}
	s.idle = time.AfterFunc(subscriptionLinger, func() { w.unsubscribeIdle(channel, s) })
}

// await waits for a wake-up in owner's mailbox on channel, at most max.
func (w *waker) await(ctx context.Context, channel, owner string, max time.Duration) error {
	w.mu.Lock()
	box := w.boxes[mailbox{channel, owner}]
	s := w.channels[channel]
	if box == nil || w.sub == nil {
		w.mu.Unlock()
		return pause(ctx, nil, max) // nothing can wake it: wait for the renewal
	}
	subscribe := !s.sent
	s.sent = true
	if subscribe && w.ps == nil {
		w.ps = w.sub.Subscribe(context.WithoutCancel(ctx))
		go w.dispatch(w.ps.ChannelWithSubscriptions())
	}
	ps, ready, confirmed := w.ps, s.ready, s.confirmed
	w.mu.Unlock()

	if subscribe {
		if err := ps.Subscribe(ctx, channel); err != nil {
			w.mu.Lock()
			s.sent = false
			w.mu.Unlock()
			return err
		}
	}
	if !confirmed {
		// Return once subscribed: a release published before then was
		// missed, so the caller asks again instead of waiting for it.
		return pause(ctx, ready, max)
	}
	return pause(ctx, box, max)
}

// pause waits for ch (nil: never), max or the end of ctx.
func pause(ctx context.Context, ch <-chan struct{}, max time.Duration) error {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dispatch hands each message to its mailbox and marks subscriptions
// confirmed, until the PubSub is closed. go-redis reconnects and
// resubscribes by itself; a wake-up published while it does is lost, and
// the waiter's renewal serves it instead.
func (w *waker) dispatch(msgs <-chan any) {
	for m := range msgs {
		w.mu.Lock()
		switch m := m.(type) {
		case *goredis.Subscription:
			if s := w.channels[m.Channel]; s != nil && m.Kind == "subscribe" && !s.confirmed {
				s.confirmed = true
				close(s.ready)
			}
		case *goredis.Message:
			if box := w.boxes[mailbox{m.Channel, m.Payload}]; box != nil {
				select {
				case box <- struct{}{}:
				default: // a wake-up is already waiting
				}
			}
		}
		w.mu.Unlock()
	}
}

// unsubscribeIdle drops channel's subscription if nobody waited on it for
// subscriptionLinger, and closes the connection when no channel is left.
func (w *waker) unsubscribeIdle(channel string, s *subscription) {
	w.mu.Lock()
	if w.channels[channel] != s || s.boxes > 0 {
		w.mu.Unlock()
		return
	}
	delete(w.channels, channel)
	ps := w.ps
	last := len(w.channels) == 0
	if last {
		w.ps = nil
	}
	defer w.mu.Unlock()
	if ps == nil {
		return
	}
	if last {
		_ = ps.Close()
		return
	}
	// Under w.mu, so that a new SUBSCRIBE to the channel goes after it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = ps.Unsubscribe(ctx, channel)
}
