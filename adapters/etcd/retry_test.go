package etcd_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// serverErrors are etcd server errors that a retry cures, as clientv3 hands
// them to its caller: "server stopped" (a member shutting down) and "unhealthy
// cluster" as rpctypes.EtcdError values, which have no gRPC status; "not a
// primary lessor" (a leader that could not confirm its leadership when asked
// to renew a lease) and "raft: stopped" (a write to a member whose server
// stopped) and "raft proposal dropped" (a write proposed while the
// leadership was changing hands) as gRPC statuses with code Unknown.
var serverErrors = []error{
	clientv3.ContextError(context.Background(), rpctypes.ErrGRPCStopped),
	clientv3.ContextError(context.Background(), rpctypes.ErrGRPCUnhealthy),
	clientv3.ContextError(context.Background(), status.Error(codes.Unknown, "not a primary lessor")),
	clientv3.ContextError(context.Background(), status.Error(codes.Unknown, "raft: stopped")),
	clientv3.ContextError(context.Background(), status.Error(codes.Unknown, "raft proposal dropped")),
}

// failingClient is a real client whose next Grants and KeepAliveOnces fail
// with queued errors, one error per call, without reaching the server.
type failingClient struct {
	fenceetcd.Client
	mu        sync.Mutex
	grants    []error
	keepAlive []error
}

func (c *failingClient) next(q *[]error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(*q) == 0 {
		return nil
	}
	err := (*q)[0]
	*q = (*q)[1:]
	return err
}

func (c *failingClient) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.grants) + len(c.keepAlive)
}

func (c *failingClient) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	if err := c.next(&c.grants); err != nil {
		return nil, err
	}
	return c.Client.Grant(ctx, ttl)
}

func (c *failingClient) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	if err := c.next(&c.keepAlive); err != nil {
		return nil, err
	}
	return c.Client.KeepAliveOnce(ctx, id)
}

// TestAcquireRetriesEtcdServerErrors: lock.Client.Acquire tries again after
// each etcd server error that a retry cures, instead of giving up after one
// attempt.
func TestAcquireRetriesEtcdServerErrors(t *testing.T) {
	fc := &failingClient{Client: sharedClient(t), grants: append([]error(nil), serverErrors...)}
	lc := lock.New(fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)}), nil)
	ctx := testkit.Context(t)
	lease, err := lc.Acquire(ctx, "job", 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire after %d injected server errors: %v; want them retried", len(serverErrors), err)
	}
	if n := fc.pending(); n != 0 {
		t.Fatalf("%d injected errors left; want every one met", n)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestKeepAliveSurvivesEtcdServerErrors: a kept-alive lease whose renewals
// meet etcd server errors that a retry cures is not lost: the keep-alive
// tries again and renews it.
func TestKeepAliveSurvivesEtcdServerErrors(t *testing.T) {
	fc := &failingClient{Client: sharedClient(t)}
	renewed := make(chan struct{}, 100)
	var mu sync.Mutex
	var failures []error
	lc := lock.New(fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)}), &lock.Options{
		Observer: &lock.Observer{
			Extended: func(lock.Event) { renewed <- struct{}{} },
			RenewalFailed: func(e lock.Event) {
				mu.Lock()
				failures = append(failures, e.Err)
				mu.Unlock()
			},
		},
	})
	ctx := testkit.Context(t)
	// 6 s: a renewal every 2 s, and 4 s for the failed ones and their retries.
	err := lc.Do(ctx, "job", 6*time.Second, func(ctx context.Context, l *lock.Lease) error {
		fc.mu.Lock()
		fc.keepAlive = append([]error(nil), serverErrors...)
		fc.mu.Unlock()
		// Wait for a renewal that succeeded after every injected error.
		for fc.pending() > 0 {
			select {
			case <-renewed:
			case <-ctx.Done():
				return fmt.Errorf("lease lost while its renewals met server errors: %w", context.Cause(ctx))
			}
		}
		select {
		case <-renewed:
		case <-ctx.Done():
			return fmt.Errorf("lease lost after its renewals met server errors: %w", context.Cause(ctx))
		}
		return l.Err()
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != len(serverErrors) {
		t.Fatalf("renewal failures observed: %v; want the %d injected ones", failures, len(serverErrors))
	}
}

// TestRollingRestartUnderDo: the members are restarted one after the
// other, as in a rolling upgrade, under Client.Do with keep-alive and while
// other clients acquire and release a lock of their own over and over. Each
// member's etcd server stops first while its client port still answers
// (etcdtest's Halt: a leader hands its leadership over, and every call that
// reaches the member is answered "etcdserver: server stopped", or for a
// write "raft: stopped"), then its
// process exits and starts again from its data. The lease survives every
// restart, and every acquire succeeds.
func TestRollingRestartUnderDo(t *testing.T) {
	c := etcdtest.New(t)
	cl := client(t, c.Endpoints())
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	var mu sync.Mutex
	var acquireErrs []error
	var acquires, renewals, stopped int
	// count notes an error by which a halted member said that its server
	// stopped, whatever became of it: that is what the test is about.
	count := func(err error) {
		if err != nil && (strings.Contains(err.Error(), "server stopped") || strings.Contains(err.Error(), "raft: stopped")) {
			stopped++
		}
	}
	failed := func(e lock.Event) {
		mu.Lock()
		defer mu.Unlock()
		count(e.Err)
	}
	holder := lock.New(b, &lock.Options{Observer: &lock.Observer{
		Extended: func(lock.Event) {
			mu.Lock()
			defer mu.Unlock()
			renewals++
		},
		RenewalFailed: failed,
		Lost:          failed,
	}})
	ctx := testkit.Context(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := lock.New(b, &lock.Options{Observer: &lock.Observer{Retrying: func(e lock.Event) {
				mu.Lock()
				count(e.Err)
				mu.Unlock()
			}}})
			name := fmt.Sprintf("other%d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, cancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := lc.Acquire(actx, name, 3*time.Second)
				if err == nil {
					// The outcome of the release is not what is tested; a
					// lock left held lapses within its TTL.
					_ = l.Release(actx)
				}
				cancel()
				mu.Lock()
				acquires++
				count(err)
				if err != nil {
					acquireErrs = append(acquireErrs, err)
				}
				mu.Unlock()
			}
		}()
	}
	// untilMet waits until a halted member's answer has reached a caller
	// since the member halted, and the lease has been renewed twice since.
	untilMet := func(m *etcdtest.Member) error {
		mu.Lock()
		s0, r0 := stopped, renewals
		mu.Unlock()
		deadline := time.Now().Add(settle)
		for {
			mu.Lock()
			met := stopped > s0 && renewals >= r0+2
			mu.Unlock()
			if met {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("within %v of halting %s: no call met its stopped server, or fewer than two renewals", settle, m.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	err := holder.Do(ctx, "job", 3*time.Second, func(ctx context.Context, l *lock.Lease) error {
		for _, m := range c.Members {
			if err := m.Halt(); err != nil {
				return err
			}
			err := untilMet(m)
			if lerr := l.Err(); lerr != nil {
				return fmt.Errorf("lease lost while %s was halted: %w", m.Name, lerr)
			}
			if err != nil {
				return err
			}
			if err := m.Shutdown(); err != nil {
				return err
			}
			if err := c.Restart(m); err != nil {
				return err
			}
			if _, err := c.Leader(ctx, settle); err != nil {
				return fmt.Errorf("after restarting %s: %w", m.Name, err)
			}
			if err := l.Err(); err != nil {
				return fmt.Errorf("lease lost across the restart of %s: %w", m.Name, err)
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acquires by other clients, %d renewals of the lease, %d calls met a stopped server", acquires, renewals, stopped)
	if err != nil {
		t.Fatalf("Do across a rolling restart: %v", err)
	}
	if len(acquireErrs) > 0 {
		t.Fatalf("%d of %d acquires failed across a rolling restart, first: %v", len(acquireErrs), acquires, acquireErrs[0])
	}
}

// TestPermitRetriesEtcdServerErrors: a semaphore's Acquire tries again after
// each etcd server error that a retry cures, as Acquire does, and such an
// error in extendPermit is Retryable.
func TestPermitRetriesEtcdServerErrors(t *testing.T) {
	fc := &failingClient{Client: sharedClient(t), grants: append([]error(nil), serverErrors...)}
	b := fenceetcd.NewBackend(fc, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	ctx := testkit.Context(t)
	permit, err := lock.New(b, nil).Semaphore("sem", 2).Acquire(ctx, 5*time.Second)
	if err != nil {
		t.Fatalf("Semaphore.Acquire after %d injected server errors: %v; want them retried", len(serverErrors), err)
	}
	if n := fc.pending(); n != 0 {
		t.Fatalf("%d injected errors left; want every one met", n)
	}
	fc.mu.Lock()
	fc.keepAlive = []error{serverErrors[2]}
	fc.mu.Unlock()
	err = extendPermit(ctx, b, "sem", permit.Owner(), 5*time.Second)
	if err == nil || !driver.Retryable(err) {
		t.Fatalf("extendPermit meeting %v: %v; want a Retryable error", serverErrors[2], err)
	}
	if err := permit.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
