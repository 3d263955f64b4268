package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// ErrReplication means Acquire took the lock but fewer replicas than
// BackendOptions.WaitReplicas acknowledged it within WaitTimeout. The lease
// was released again (see ReplicationError.ReleaseErr), so no lock is left
// behind.
var ErrReplication = errors.New("fencekit/redis: lease not acknowledged by enough replicas")

// ErrWaitUnsupported means BackendOptions.WaitReplicas is set but the client
// cannot send WAIT on the connection that ran the acquire script: WAIT only
// counts the writes of its own connection. *goredis.Client and
// *goredis.ClusterClient (and the failover clients, which are of those
// types) can; a *goredis.Ring or another Client cannot. Nothing was sent.
var ErrWaitUnsupported = errors.New("fencekit/redis: replication wait needs a *redis.Client or *redis.ClusterClient")

// ReplicationError is the error Acquire returns when the replication wait
// fell short. It matches ErrReplication.
type ReplicationError struct {
	Name    string        // the lock name
	Want    int           // BackendOptions.WaitReplicas
	Got     int           // replicas that acknowledged; -1 when WAIT itself failed
	Timeout time.Duration // BackendOptions.WaitTimeout
	// Err is why WAIT failed, when it did not simply count too few.
	Err error
	// ReleaseErr is set when releasing the unacknowledged lease failed: it
	// then stays until its TTL ends.
	ReleaseErr error
}

// Error describes the shortfall.
func (e *ReplicationError) Error() string {
	msg := fmt.Sprintf("fencekit/redis: acquire %q: %d of %d replicas acknowledged within %v", e.Name, e.Got, e.Want, e.Timeout)
	if e.Err != nil {
		msg = fmt.Sprintf("fencekit/redis: acquire %q: replication wait failed: %v", e.Name, e.Err)
	}
	if e.ReleaseErr != nil {
		msg += fmt.Sprintf(" (releasing the lease again failed: %v)", e.ReleaseErr)
	}
	return msg
}

// Is makes errors.Is(err, ErrReplication) true.
func (e *ReplicationError) Is(target error) bool { return target == ErrReplication }

// Unwrap returns the WAIT and release failures, if any.
func (e *ReplicationError) Unwrap() []error {
	var errs []error
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.ReleaseErr != nil {
		errs = append(errs, e.ReleaseErr)
	}
	return errs
}

// masterForKeyer is what *goredis.ClusterClient offers to reach the master of
// a key's slot directly.
type masterForKeyer interface {
	MasterForKey(ctx context.Context, key string) (*goredis.Client, error)
}

// stateReloader is implemented by *goredis.ClusterClient.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// releaseTimeout bounds the clean-up release after a failed replication
// wait, which runs even when the caller's context has ended.
const releaseTimeout = 2 * time.Second

// waitConn returns the single-node client whose pipeline runs the acquire
// script and WAIT on one connection. A ClusterClient pipeline would send the
// keyless WAIT to an arbitrary master, so for a cluster the pipeline goes to
// the master that owns the lock's slot.
func (b *Backend) waitConn(ctx context.Context, key string) (*goredis.Client, error) {
	switch c := b.client.(type) {
	case *goredis.Client:
		return c, nil
	case masterForKeyer:
		return c.MasterForKey(ctx, key)
	default:
		return nil, fmt.Errorf("%w, got %T", ErrWaitUnsupported, b.client)
	}
}

// acquireWait runs the acquire script and WAIT in one pipeline, so that WAIT
// counts the replicas that have the new lease; if too few acknowledge, it
// releases the lease again.
func (b *Backend) acquireWait(ctx context.Context, name, owner string, keys []string, args []any) (fence.Token, error) {
	node, err := b.waitConn(ctx, keys[0])
	if err != nil {
		return 0, fmt.Errorf("fencekit/redis: acquire %q: %w", name, err)
	}
	if rt := node.Options().ReadTimeout; rt > 0 && b.waitTimeout >= rt {
		return 0, fmt.Errorf("fencekit/redis: acquire %q: WaitTimeout %v must be below the client's ReadTimeout %v", name, b.waitTimeout, rt)
	}

	run := func(eval bool) (*goredis.Cmd, *goredis.IntCmd, error) {
		pipe := node.Pipeline()
		var script *goredis.Cmd
		if eval {
			script = pipe.Eval(ctx, acquireScript.src, keys, args...)
		} else {
			script = pipe.EvalSha(ctx, acquireScript.hash, keys, args...)
		}
		// Pipeliner has no Wait method; WAIT numreplicas timeout-ms.
		wait := goredis.NewIntCmd(ctx, "wait", b.waitReplicas, millis(b.waitTimeout))
		_ = pipe.Process(ctx, wait)
		_, err := pipe.Exec(ctx)
		return script, wait, err
	}
	script, wait, execErr := run(false)
	if isNoScript(script.Err()) {
		// The script did not run; WAIT had nothing new to count. EVAL runs
		// the script and caches it again.
		script, wait, execErr = run(true)
	}

	reply, err := script.Slice()
	if err != nil {
		if goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK") {
			// The slot moved: the script did not run on this node.
			if r, ok := b.client.(stateReloader); ok {
				r.ReloadState(ctx)
			}
			return 0, fmt.Errorf("fencekit/redis: acquire %q: %w", name, err)
		}
		if isRedisError(err) {
			return 0, acquireError(name, err)
		}
		// A transport error or an ended context: the script may have run.
		// Take the lease back so that none is left behind.
		return 0, b.unreplicated(ctx, name, owner, -1, errors.Join(err, execErr))
	}
	token, err := parseAcquire(name, reply)
	if err != nil {
		return 0, err
	}
	got, err := wait.Result()
	if err != nil {
		return 0, b.unreplicated(ctx, name, owner, -1, err)
	}
	if got < int64(b.waitReplicas) {
		return 0, b.unreplicated(ctx, name, owner, int(got), nil)
	}
	return token, nil
}

// unreplicated releases the lease that was not acknowledged and describes it.
func (b *Backend) unreplicated(ctx context.Context, name, owner string, got int, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	e := &ReplicationError{Name: name, Want: b.waitReplicas, Got: got, Timeout: b.waitTimeout, Err: cause}
	if err := b.release(rctx, name, owner); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		e.ReleaseErr = err
	}
	return e
}

// isRedisError reports whether err is a reply from the server (as opposed to
// a transport error or an ended context).
func isRedisError(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
