package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock"
)

// listenLinger is how long the listening connection stays open after the
// last local waiter left: a lock that is contended now is likely to be
// contended again in a moment, and listening anew costs a connection.
const listenLinger = 30 * time.Second

// waker delivers the notifications that Release sends to the waiters of
// this Backend. Each Backend has a channel of its own, which its waiters'
// places name, so a wake-up reaches only the process of the waiter it is
// for: one connection per Backend, taken out of the pool (Hijack) on the
// first wait and closed once nobody has waited for listenLinger, each
// notification handed to its waiter's mailbox.
type waker struct {
	pool    Pool
	channel string
	linger  time.Duration // listenLinger; shorter in tests

	start sync.Mutex // held while a listening connection is being opened

	mu        sync.Mutex
	boxes     map[string]chan struct{} // buffered (1): a wake-up waits for its reader
	listening bool                     // a listening connection is up
	pid       uint32                   // its server process, for tests
	stop      context.CancelFunc       // ends it
	idle      *time.Timer              // stops it once nobody waited for linger
}

func newWaker(pool Pool) *waker {
	id, err := lock.NewOwner() // 128 random bits, in hex
	if err != nil {
		id = "" // no wake-ups can be addressed: waiters sleep to their renewal
	}
	w := &waker{pool: pool, linger: listenLinger, boxes: map[string]chan struct{}{}}
	if id != "" {
		w.channel = "fencekit_wake_" + id
	}
	return w
}

// open makes sure the mailbox exists.
func (w *waker) open(box string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.boxes[box]; !ok {
		w.boxes[box] = wake.NewBox()
	}
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
}

// close removes the mailbox, if any; the connection lingers.
func (w *waker) close(box string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.boxes[box]; !ok {
		return
	}
	delete(w.boxes, box)
	if len(w.boxes) == 0 && w.listening && w.idle == nil {
		w.idle = time.AfterFunc(w.linger, w.stopIdle)
	}
}

// await waits for a wake-up in box, at most max. When nobody listens yet,
// it opens the listening connection and returns once LISTEN took effect:
// a notification sent before then was missed, so the caller asks again.
// With a recheck, it asks recheck instead whether a wake-up may have been
// missed (true, or an error: return), and otherwise goes on waiting: any
// change committed after LISTEN took effect notifies it.
func (w *waker) await(ctx context.Context, box string, max time.Duration, recheck func(context.Context) (bool, error)) error {
	start := time.Now()
	err := w.awaitOnce(ctx, box, max)
	switch {
	case !errors.Is(err, errListened):
		return err
	case recheck == nil:
		return nil
	}
	if missed, rerr := recheck(ctx); missed || rerr != nil {
		// A failed recheck makes the caller ask again, which reports the
		// failure; an ended context is the caller's to see.
		return ctx.Err()
	}
	w.mu.Lock()
	ch := w.boxes[box]
	w.mu.Unlock()
	return wake.Wait(ctx, ch, max-time.Since(start))
}

// errListened is awaitOnce's report that it did not wait: LISTEN has just
// taken effect, and a wake-up sent before may have been missed.
var errListened = errors.New("postgres: listening from now on")

// awaitOnce waits for a wake-up in box, at most max, or opens the
// listening connection and returns errListened without waiting.
func (w *waker) awaitOnce(ctx context.Context, box string, max time.Duration) error {
	w.mu.Lock()
	ch, listening := w.boxes[box], w.listening
	w.mu.Unlock()
	if ch == nil || w.channel == "" {
		return wake.Wait(ctx, nil, max) // nothing can wake it: wait for the renewal
	}
	if listening {
		return wake.Wait(ctx, ch, max)
	}
	w.start.Lock()
	defer w.start.Unlock()
	w.mu.Lock()
	listening = w.listening
	w.mu.Unlock()
	if listening {
		return errListened // another waiter opened it meanwhile: ask again
	}
	if err := w.listen(ctx); err != nil {
		return err
	}
	return errListened
}

// listen opens the listening connection: a pooled connection taken out of
// the pool, on which LISTEN runs with the channel name as a parameter (a
// DO block quotes it with format('%I')).
func (w *waker) listen(ctx context.Context) error {
	pc, err := w.pool.Acquire(ctx)
	if err != nil {
		return wrapErr("listen for wake-ups", err)
	}
	conn := pc.Hijack()
	fail := func(err error) error {
		_ = conn.Close(context.WithoutCancel(ctx))
		return wrapErr("listen for wake-ups", err)
	}
	if _, err := conn.Exec(ctx, "SELECT set_config('fencekit.wake_channel', $1, false)", w.channel); err != nil {
		return fail(err)
	}
	if _, err := conn.Exec(ctx, "DO $$BEGIN EXECUTE format('LISTEN %I', current_setting('fencekit.wake_channel')); END$$"); err != nil {
		return fail(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	w.mu.Lock()
	w.listening, w.stop, w.pid = true, stop, conn.PgConn().PID()
	if len(w.boxes) == 0 && w.idle == nil {
		w.idle = time.AfterFunc(w.linger, w.stopIdle)
	}
	w.mu.Unlock()
	go w.dispatch(lctx, conn)
	return nil
}

// dispatch hands each notification to its mailbox until the connection
// fails or is stopped, then closes it; the next wait opens a new one. A
// wake-up sent while none listens is lost, and the waiter's renewal serves
// it instead.
func (w *waker) dispatch(ctx context.Context, conn *pgx.Conn) {
	defer func() {
		w.mu.Lock()
		w.listening = false
		if w.idle != nil {
			w.idle.Stop()
			w.idle = nil
		}
		w.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		w.mu.Lock()
		if box := w.boxes[n.Payload]; box != nil {
			wake.Post(box)
		}
		w.mu.Unlock()
	}
}

// stopIdle closes the listening connection if nobody waited for linger.
func (w *waker) stopIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idle = nil
	if len(w.boxes) > 0 || !w.listening {
		return
	}
	w.stop()
}
