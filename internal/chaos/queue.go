package chaos

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// recordingQueue is recordingBackend for a backend that queues waiters
// (lock.QueueBackend), so that the workers' Client.Acquire waits in line on
// it, as it does for applications, instead of polling: the chaos run then
// covers waiters under its faults too. Each AcquireOrEnqueue that returns a
// token is recorded as an Acquire, with its own call's window.
type recordingQueue struct {
	recordingBackend
	q lock.QueueBackend
}

// recording wraps b for the runner r, keeping its queued waiting when it
// has it.
func recording(r *runner, b lock.Backend) lock.Backend {
	rb := recordingBackend{Backend: b, r: r}
	if q, ok := b.(lock.QueueBackend); ok {
		return recordingQueue{recordingBackend: rb, q: q}
	}
	return rb
}

func (b recordingQueue) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	call := b.r.now()
	tok, err := b.q.AcquireOrEnqueue(ctx, name, owner, ttl, place)
	b.record(ctx, name, owner, tok, err, call, b.r.now())
	return tok, err
}

func (b recordingQueue) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	return b.q.AwaitTurn(ctx, name, owner, max)
}

func (b recordingQueue) LeaveQueue(ctx context.Context, name, owner string) error {
	return b.q.LeaveQueue(ctx, name, owner)
}
