package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

func TestLeadReturnsFnResultAndResigns(t *testing.T) {
	b := memory.NewBackend()
	client := lock.New(b, nil)
	want := errors.New("done leading")
	var term fence.Token
	err := client.Lead(context.Background(), "leader", time.Second, func(ctx context.Context, l *lock.Leadership) error {
		term = l.Term()
		return want
	})
	if !errors.Is(err, want) {
		t.Fatalf("Lead = %v; want fn's error", err)
	}
	if info, _ := inspectLock(context.Background(), b, "leader"); info.Held {
		t.Fatalf("still held after Lead returned: %+v", info)
	}
	if term == 0 {
		t.Fatal("fn ran without a term")
	}
}

func TestLeadResignsWhenContextEnds(t *testing.T) {
	b := memory.NewBackend()
	ctx, cancel := context.WithCancel(context.Background())
	err := lock.New(b, nil).Lead(ctx, "leader", time.Second, func(ctx context.Context, l *lock.Leadership) error {
		cancel()
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead = %v; want context.Canceled", err)
	}
	if info, _ := inspectLock(context.Background(), b, "leader"); info.Held {
		t.Fatalf("still held after Lead returned: %+v", info)
	}
}

func TestLeadResignsWhenFnPanics(t *testing.T) {
	b := memory.NewBackend()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v; want the panic to go on", r)
			}
		}()
		_ = lock.New(b, nil).Lead(context.Background(), "leader", time.Second, func(context.Context, *lock.Leadership) error {
			panic("boom")
		})
	}()
	if info, _ := inspectLock(context.Background(), b, "leader"); info.Held {
		t.Fatalf("still held after fn panicked: %+v", info)
	}
}

func TestLeadRefusesNilFunction(t *testing.T) {
	if err := lock.New(memory.NewBackend(), nil).Lead(context.Background(), "leader", time.Second, nil); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Lead(nil) = %v; want ErrInvalid", err)
	}
}

// permanentBackend fails every Acquire with an error no retry cures.
type permanentBackend struct{ driver.Backend }

var errBroken = errors.New("table missing")

func (permanentBackend) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{}, errBroken
}

func TestCampaignFailsFastOnPermanentError(t *testing.T) {
	e := lock.New(permanentBackend{memory.NewBackend()}, nil).Election("leader", time.Second)
	if _, err := e.Campaign(context.Background()); !errors.Is(err, errBroken) {
		t.Fatalf("Campaign = %v; want the permanent error at once", err)
	}
}

func TestLeaderWithoutLeader(t *testing.T) {
	e := lock.New(memory.NewBackend(), nil).Election("leader", time.Second)
	if _, err := e.Leader(context.Background()); !errors.Is(err, lock.ErrNoLeader) {
		t.Fatalf("Leader = %v; want ErrNoLeader", err)
	}
	bad := lock.New(memory.NewBackend(), nil).Election("", time.Second)
	if _, err := bad.Leader(context.Background()); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Leader of an empty name = %v; want ErrInvalid", err)
	}
	if _, err := bad.Campaign(context.Background()); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Campaign of an empty name = %v; want ErrInvalid", err)
	}
}

// Lead runs the function while this process leads; the term fences its
// writes.
func ExampleClient_Lead() {
	backend, store := memory.NewBackend(), memory.NewStore()
	client := lock.New(backend, &lock.Options{Metadata: "scheduler-1"})
	ctx := context.Background()

	err := client.Lead(ctx, "scheduler", 10*time.Second, func(ctx context.Context, l *lock.Leadership) error {
		leader, err := client.Election("scheduler", 10*time.Second).Leader(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("leading under term %d; the backend says %q leads\n", l.Term(), leader.Metadata)
		return l.Fenced(store).Put(ctx, "schedule", []byte("v1"))
	})
	fmt.Println("Lead:", err)
	rec, _ := store.Get(ctx, "schedule")
	fmt.Printf("%s written under term %d\n", rec.Value, rec.Fence)
	// Output:
	// leading under term 1; the backend says "scheduler-1" leads
	// Lead: <nil>
	// v1 written under term 1
}

func TestLeadGivesUpCampaigningWhenContextEnds(t *testing.T) {
	b := memory.NewBackend()
	holder, err := lock.New(b, nil).TryAcquire(context.Background(), "leader", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err = lock.New(b, nil).Lead(ctx, "leader", time.Minute, func(context.Context, *lock.Leadership) error {
		ran = true
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrNotAcquired) || ran {
		t.Fatalf("Lead = %v (fn ran: %v); want ErrNotAcquired and DeadlineExceeded, fn not run", err, ran)
	}
}

// Campaign returns a leadership whose term fences the leader's writes;
// anyone can ask the election who leads.
func ExampleElection_Campaign() {
	backend := memory.NewBackend()
	ctx := context.Background()
	node := lock.New(backend, &lock.Options{Metadata: "node-a"})
	l, err := node.Election("primary", 10*time.Second).Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	watcher := lock.New(backend, nil).Election("primary", 10*time.Second)
	leader, _ := watcher.Leader(ctx)
	fmt.Printf("%s leads %q under term %d\n", leader.Metadata, leader.Name, leader.Term)

	_ = l.Resign(ctx)
	<-l.Done()
	_, err = watcher.Leader(ctx)
	fmt.Println("after Resign:", errors.Is(err, lock.ErrNoLeader), errors.Is(l.Err(), lock.ErrReleased))
	// Output:
	// node-a leads "primary" under term 1
	// after Resign: true true
}
