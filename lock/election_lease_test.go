package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// A leadership's lease is kept alive whatever the Client's Options say
// (Options.KeepAlive is for Acquire and TryAcquire), and its term is its own
// lease's token for good, whatever newer terms its Election sees later.

// electionTTL is short, so that a leadership left without a keep-alive is
// lost within the test, and long enough that a renewal every third of it
// keeps up on a loaded machine (at 300ms, a renewal under -race beside a
// busy simulation once answered after the deadline).
const electionTTL = time.Second

// heldFor is how long the keep-alive tests expect a leadership to last:
// several TTLs, while one without renewals is lost after one.
const heldFor = 3 * electionTTL

func TestCampaignKeepsItsLeaseAliveWithoutClientKeepAlive(t *testing.T) {
	t.Parallel() // it waits for several TTLs
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	mem := memory.NewBackend()
	c := lock.New(mem, &lock.Options{KeepAlive: false})
	e := c.Election("leader", electionTTL)
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(context.Background())
	select {
	case <-l.Done():
		t.Fatalf("leadership ended %v after it began: %v", time.Since(l.Since()), l.Err())
	case <-time.After(heldFor):
	}
	if err := l.Err(); err != nil {
		t.Fatalf("leadership after %v: %v; want still held", heldFor, err)
	}
	leader, err := e.Leader(ctx)
	if err != nil || leader.Term != l.Term() {
		t.Fatalf("Leader = %+v, %v; want term %d still leading", leader, err, l.Term())
	}
}

func TestLeadKeepsItsLeaseAliveWithoutClientKeepAlive(t *testing.T) {
	t.Parallel() // it waits for several TTLs
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c := lock.New(memory.NewBackend(), &lock.Options{KeepAlive: false})
	runs := 0
	var lost error
	err := c.Lead(ctx, "leader", electionTTL, func(ctx context.Context, l *lock.Leadership) error {
		runs++
		if runs > 1 {
			return nil // campaigned again: the first term was lost
		}
		select {
		case <-ctx.Done():
			lost = context.Cause(ctx)
		case <-time.After(heldFor):
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Lead = %v", err)
	}
	if runs != 1 || lost != nil {
		t.Fatalf("fn ran %d times, its first term ended with %v; want one run, leading for %v", runs, lost, heldFor)
	}
}

func TestTermOfALostLeadershipStaysItsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	mem := memory.NewBackend()
	e := lock.New(mem, nil).Election("leader", electionTTL)
	old, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	term := old.Lease().Token()
	if old.Term() != term {
		t.Fatalf("Term = %d; want the lease's token %d", old.Term(), term)
	}
	// The old leader's lease runs out on the backend (a pause past the TTL,
	// say) and another process wins the next term.
	mem.Expire("leader")
	other, err := lock.New(mem, nil).Election("leader", electionTTL).Campaign(ctx)
	if err != nil {
		t.Fatalf("the other candidate's Campaign: %v", err)
	}
	defer other.Resign(context.Background())
	if other.Term() <= term {
		t.Fatalf("new term %d; want above the old %d", other.Term(), term)
	}
	// The old leadership learns of it at its next renewal.
	select {
	case <-old.Done():
	case <-ctx.Done():
		t.Fatal("the old leadership was not lost after its lease was taken over")
	}
	if err := old.Err(); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("old leadership's Err = %v; want ErrLost", err)
	}
	// The old leader's Election sees the newer term.
	if leader, err := e.Leader(ctx); err != nil || leader.Term != other.Term() {
		t.Fatalf("Leader = %+v, %v; want the new term %d", leader, err, other.Term())
	}
	if got := old.Term(); got != term {
		t.Fatalf("old leadership's Term = %d after its election saw term %d; want its own, %d", got, other.Term(), term)
	}
}
