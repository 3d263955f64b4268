package locktest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// buggyBackend is a lock.Backend with deliberate defects, to show that the
// suite notices each one.
type buggyBackend struct {
	releaseAnyOwner  bool // Release ignores the owner: delete by name
	reuseTokens      bool // the counter restarts when the lock is released
	extendRecreates  bool // Extend re-creates an expired lease
	reacquireNewTok  bool // a same-owner re-acquire mints a new token
	noExclusion      bool // Acquire always succeeds, replacing the holder
	releaseKeepsHeld bool // Release reports success but leaves the lease

	mu     sync.Mutex
	leases map[string]*buggyLease
	last   map[string]fence.Token
}

type buggyLease struct {
	owner   string
	token   fence.Token
	expires time.Time
}

func newBuggy(configure func(*buggyBackend)) *buggyBackend {
	b := &buggyBackend{leases: map[string]*buggyLease{}, last: map[string]fence.Token{}}
	configure(b)
	return b
}

func (b *buggyBackend) live(name string) *buggyLease {
	l := b.leases[name]
	if l != nil && time.Now().After(l.expires) {
		delete(b.leases, name)
		return nil
	}
	return l
}

func (b *buggyBackend) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.live(name); l != nil && !b.noExclusion {
		if l.owner != owner {
			return 0, &lock.HeldError{Name: name, TTL: time.Until(l.expires)}
		}
		l.expires = time.Now().Add(ttl)
		if b.reacquireNewTok {
			b.last[name]++
			l.token = b.last[name]
		}
		return l.token, nil
	}
	b.last[name]++
	b.leases[name] = &buggyLease{owner: owner, token: b.last[name], expires: time.Now().Add(ttl)}
	return b.last[name], nil
}

func (b *buggyBackend) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.live(name)
	if l == nil && b.extendRecreates {
		b.leases[name] = &buggyLease{owner: owner, token: b.last[name], expires: time.Now().Add(ttl)}
		return nil
	}
	if l == nil || l.owner != owner {
		return lock.ErrNotHeld
	}
	l.expires = time.Now().Add(ttl)
	return nil
}

func (b *buggyBackend) Release(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.live(name)
	if l == nil || (l.owner != owner && !b.releaseAnyOwner) {
		return lock.ErrNotHeld
	}
	if b.releaseKeepsHeld {
		return nil
	}
	delete(b.leases, name)
	if b.reuseTokens {
		b.last[name] = 0
	}
	return nil
}

func (b *buggyBackend) Inspect(ctx context.Context, name string) (lock.Info, error) {
	if name == "" {
		return lock.Info{}, fence.Invalid("empty lock name")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.live(name)
	if l == nil {
		return lock.Info{Name: name}, nil
	}
	return lock.Info{Name: name, Held: true, Owner: l.owner, Token: l.token, TTL: time.Until(l.expires)}, nil
}

func failures(b lock.Backend) map[string]error {
	failed := map[string]error{}
	for _, c := range locktest.Checks() {
		ctx, cancel := context.WithTimeout(context.Background(), locktest.Timeout)
		if err := c.Run(ctx, b, locktest.Namespace()); err != nil {
			failed[c.Name] = err
		}
		cancel()
	}
	return failed
}

func TestSuiteCatchesBrokenBackends(t *testing.T) {
	cases := []struct {
		name     string
		backend  lock.Backend
		mustFail []string
		mustPass []string
	}{
		{
			name:     "releases without an owner check",
			backend:  newBuggy(func(b *buggyBackend) { b.releaseAnyOwner = true }),
			mustFail: []string{"WrongOwnerReleaseRefused", "LateReleaseLeavesNewHolder"},
			mustPass: []string{"MutualExclusion", "TokensIncreaseAcrossRelease"},
		},
		{
			name:     "reuses tokens after a release",
			backend:  newBuggy(func(b *buggyBackend) { b.reuseTokens = true }),
			mustFail: []string{"TokensIncreaseAcrossRelease", "ConcurrentAcquirersOneWinner", "DoReleasesAfterwards"},
			mustPass: []string{"MutualExclusion", "WrongOwnerReleaseRefused"},
		},
		{
			name:     "re-creates a lease on a late extend",
			backend:  newBuggy(func(b *buggyBackend) { b.extendRecreates = true }),
			mustFail: []string{"ExtendAfterExpiryNeverRecreates", "WrongOwnerExtendRefused"},
			mustPass: []string{"MutualExclusion", "ReleaseFreesLock"},
		},
		{
			name:     "mints a new token on a same-owner re-acquire",
			backend:  newBuggy(func(b *buggyBackend) { b.reacquireNewTok = true }),
			mustFail: []string{"SameOwnerReacquireKeepsToken"},
			mustPass: []string{"MutualExclusion", "TokensIncreaseAcrossRelease"},
		},
		{
			name:     "gives the lock to everyone",
			backend:  newBuggy(func(b *buggyBackend) { b.noExclusion = true }),
			mustFail: []string{"MutualExclusion", "ConcurrentAcquirersOneWinner", "ClientTryAcquireHeld"},
			mustPass: []string{"TokensIncreaseAcrossRelease"},
		},
		{
			name:     "does not really release",
			backend:  newBuggy(func(b *buggyBackend) { b.releaseKeepsHeld = true }),
			mustFail: []string{"ReleaseFreesLock", "DoReleasesAfterwards", "LeaseTTLAndRelease"},
			mustPass: []string{"MutualExclusion"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			failed := failures(c.backend)
			for _, name := range c.mustFail {
				if _, ok := failed[name]; !ok {
					t.Errorf("check %s passed on a backend that %s", name, c.name)
				}
			}
			for _, name := range c.mustPass {
				if err, ok := failed[name]; ok {
					t.Errorf("check %s failed on a backend whose only defect is that it %s: %v", name, c.name, err)
				}
			}
		})
	}
}

func TestSuitePassesMemoryBackend(t *testing.T) {
	if failed := failures(memory.NewBackend()); len(failed) > 0 {
		t.Fatalf("checks failed on the memory backend: %v", failed)
	}
}

func ExampleRun() {
	// In a _test.go file of your backend's package:
	//
	//	func TestConformance(t *testing.T) {
	//		locktest.Run(t, func(t *testing.T) lock.Backend { return mybackend.New() })
	//	}
	fmt.Println(len(locktest.Checks()) == len(locktest.BackendChecks())+len(locktest.ClientChecks()))
	// Output: true
}

func TestMonotonicPassesMemoryBackend(t *testing.T) {
	locktest.Monotonic(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}
