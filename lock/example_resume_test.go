package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// A worker that restarts mid-job adopts its own lease: it saved the owner
// value with its progress, and the new process resumes the lease by name and
// owner, with the same token, so its writes continue where the first
// process's left off.
func ExampleClient_Resume() {
	ctx := context.Background()
	backend, store := memory.NewBackend(), memory.NewStore()

	// The first process takes the lock, writes, and saves its owner value.
	lease, err := lock.New(backend, nil).Acquire(ctx, "import", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	saved := lease.Owner() // persisted with the job's progress
	fmt.Println("batch 1:", lease.Fenced(store).Put(ctx, "progress", []byte("batch 1")))

	// The process restarts. The new one resumes the lease, keeps it alive
	// while it works, and releases it at the end.
	worker := lock.New(backend, nil)
	err = worker.ResumeDo(ctx, "import", saved, time.Minute, func(ctx context.Context, l *lock.Lease) error {
		fmt.Println("same token:", l.Token() == lease.Token())
		return l.Fenced(store).Put(ctx, "progress", []byte("batch 2"))
	})
	fmt.Println("resumed run:", err)

	// The lease is gone now: resuming it again is refused, and nothing is
	// re-created.
	_, err = worker.Resume(ctx, "import", saved, time.Minute)
	fmt.Println("resume after the release:", errors.Is(err, lock.ErrNotHeld))
	// Output:
	// batch 1: <nil>
	// same token: true
	// resumed run: <nil>
	// resume after the release: true
}
