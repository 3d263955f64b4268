package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// ErrReplication means fewer replicas than asked for (BackendOptions or
// StoreOptions WaitReplicas) acknowledged a write within WaitTimeout, or
// WAIT itself failed.
//
// For a Backend's acquire the lease was released again (see
// ReplicationError.ReleaseErr), so no lock is left behind. For a Store write
// the outcome is unknown: the primary applied the write, and a failover may
// still roll it back. Either way the same call may be retried: an acquire by
// the same owner, a write with the same token.
var ErrReplication = errors.New("fencekit/redis: write not acknowledged by enough replicas")

// ErrWaitUnsupported means WaitReplicas is set but the client cannot send
// WAIT on the connection that ran the script: WAIT only counts the writes of
// its own connection. *goredis.Client and *goredis.ClusterClient (and the
// failover clients, which are of those types) can; another Client cannot.
// Nothing was sent.
var ErrWaitUnsupported = errors.New("fencekit/redis: replication wait needs a *redis.Client or *redis.ClusterClient")

// ReplicationError is the error a waiting Acquire or Store write returns
// when the replication wait fell short. It matches ErrReplication, and
// driver.ErrTransient when a retry may cure it (too few acknowledgements, or
// WAIT failing for a transient reason).
type ReplicationError struct {
	Op      string        // "acquire", "put", "delete" or "advance"; "" means "acquire"
	Name    string        // the lock name, or the Store key
	Want    int           // WaitReplicas
	Got     int           // replicas that acknowledged; -1 when WAIT itself failed
	Timeout time.Duration // WaitTimeout
	// Err is why WAIT failed, when it did not simply count too few.
	Err error
	// ReleaseErr is set when releasing the unacknowledged lease failed: it
	// then stays until its TTL ends (lock.Client releases it when it gives
	// up). Always nil for a Store write.
	ReleaseErr error
}

// Error describes the shortfall.
func (e *ReplicationError) Error() string {
	op := e.Op
	if op == "" {
		op = "acquire"
	}
	msg := fmt.Sprintf("fencekit/redis: %s %q: %d of %d replicas acknowledged within %v", op, e.Name, e.Got, e.Want, e.Timeout)
	if e.Err != nil {
		msg = fmt.Sprintf("fencekit/redis: %s %q: replication wait failed: %v", op, e.Name, e.Err)
	}
	if op != "acquire" {
		msg += " (outcome unknown: applied on the primary, may be lost in a failover)"
	}
	if e.ReleaseErr != nil {
		msg += fmt.Sprintf(" (releasing the lease again failed: %v)", e.ReleaseErr)
	}
	return msg
}

// Is makes errors.Is(err, ErrReplication) true, and errors.Is(err,
// driver.ErrTransient) when a retry may cure the shortfall: a replica that
// lags or reconnects acknowledges later, so lock.Client retries a waiting
// Acquire (with the same owner, which the script recognises) instead of
// failing at once. A WAIT refused for good (NOPERM, say) is not transient.
func (e *ReplicationError) Is(target error) bool {
	switch target {
	case ErrReplication:
		return true
	case driver.ErrTransient:
		return e.Err == nil || driver.Retryable(e.Err)
	}
	return false
}

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

// DefaultWaitTimeout is the WAIT timeout used when the options ask for
// replicas but leave WaitTimeout at zero.
const DefaultWaitTimeout = time.Second

// replicationWait is WAIT n timeout after a script, as BackendOptions and
// StoreOptions configure it.
type replicationWait struct {
	replicas int
	timeout  time.Duration
}

func newReplicationWait(replicas int, timeout time.Duration) replicationWait {
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	return replicationWait{replicas: replicas, timeout: timeout}
}

func (w replicationWait) on() bool { return w.replicas > 0 }

// masterForKeyer is what *goredis.ClusterClient offers to reach the master of
// a key's slot directly.
type masterForKeyer interface {
	MasterForKey(ctx context.Context, key string) (*goredis.Client, error)
}

// masterLister is what *goredis.ClusterClient offers to reach every master,
// so that an ASK redirection can be followed to its node.
type masterLister interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *goredis.Client) error) error
}

// stateReloader is implemented by *goredis.ClusterClient.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// waitConn returns the single-node client whose pipeline runs the script
// and WAIT on one connection. A ClusterClient pipeline would send the
// keyless WAIT to an arbitrary master, so for a cluster the pipeline goes to
// the master that owns the key's slot.
func waitConn(ctx context.Context, c Client, key string) (*goredis.Client, error) {
	switch c := c.(type) {
	case *goredis.Client:
		return c, nil
	case masterForKeyer:
		return c.MasterForKey(ctx, key)
	default:
		return nil, fmt.Errorf("%w, got %T", ErrWaitUnsupported, c)
	}
}

// waited is what a script run with WAIT produced. When err is nil, script
// holds the script's reply and wait WAIT's.
type waited struct {
	script *goredis.Cmd
	wait   *goredis.IntCmd
}

// run sends s and WAIT in one pipeline on the connection of the node that
// owns keys[0], so that WAIT counts the replicas that have the script's
// writes. It resends with EVAL after NOSCRIPT, follows an ASK redirection
// (a slot being migrated) once, with ASKING, and after MOVED reloads the
// cluster's state and returns a transient error (the script did not run).
// It returns by ctx's deadline.
func (w replicationWait) run(ctx context.Context, c Client, s *script, once bool, keys []string, args []any) (waited, error) {
	node, err := waitConn(ctx, c, keys[0])
	if err != nil {
		return waited{}, err
	}
	if rt := node.Options().ReadTimeout; rt > 0 && w.timeout >= rt {
		return waited{}, fmt.Errorf("WaitTimeout %v must be below the client's ReadTimeout %v", w.timeout, rt)
	}
	var res waited
	if err := bounded(ctx, func() { res = w.send(ctx, c, node, s, once, keys, args) }); err != nil {
		return waited{}, err
	}
	if err := res.script.Err(); goredis.HasErrorPrefix(err, "MOVED ") || goredis.HasErrorPrefix(err, "ASK ") {
		// The slot moved (or moved again while we followed ASK): the
		// script did not run here. The next attempt goes to the new owner.
		if r, ok := c.(stateReloader); ok {
			r.ReloadState(ctx)
		}
		return waited{}, driver.Transient(err)
	}
	return res, nil
}

// send runs the pipeline on node, then on the node an ASK names.
func (w replicationWait) send(ctx context.Context, c Client, node *goredis.Client, s *script, once bool, keys []string, args []any) waited {
	res := w.pipeline(ctx, node, false, s, once, keys, args)
	if err := res.script.Err(); goredis.HasErrorPrefix(err, "ASK ") {
		if target := askTarget(ctx, c, err); target != nil {
			res = w.pipeline(ctx, target, true, s, once, keys, args)
		}
	}
	return res
}

// pipeline sends [ASKING,] the script and WAIT as one pipeline on node,
// and once more with EVAL when the server did not know the script.
func (w replicationWait) pipeline(ctx context.Context, node *goredis.Client, asking bool, s *script, once bool, keys []string, args []any) waited {
	exec := func(eval bool) waited {
		pipe := node.Pipeline()
		if asking {
			_ = pipe.Process(ctx, goredis.NewStatusCmd(ctx, "asking"))
		}
		res := waited{script: s.cmd(ctx, eval, keys, args)}
		_ = pipe.Process(ctx, wrapOnce(res.script, once))
		// Pipeliner has no Wait method; WAIT numreplicas timeout-ms.
		res.wait = goredis.NewIntCmd(ctx, "wait", w.replicas, millis(w.timeout))
		_ = pipe.Process(ctx, res.wait)
		_, _ = pipe.Exec(ctx)
		return res
	}
	res := exec(false)
	if isNoScript(res.script.Err()) {
		// The script did not run; WAIT had nothing new to count. EVAL runs
		// the script and caches it again.
		res = exec(true)
	}
	return res
}

// askTarget returns the master an ASK reply ("ASK <slot> <host:port>")
// names, or nil when the client cannot reach it.
func askTarget(ctx context.Context, c Client, ask error) *goredis.Client {
	fields := strings.Fields(ask.Error())
	masters, ok := c.(masterLister)
	if len(fields) != 3 || !ok {
		return nil
	}
	var (
		mu    sync.Mutex
		found *goredis.Client
	)
	_ = masters.ForEachMaster(ctx, func(_ context.Context, m *goredis.Client) error {
		if m.Options().Addr == fields[2] {
			mu.Lock()
			found = m
			mu.Unlock()
		}
		return nil
	})
	return found
}

// acquireWait runs the acquire script and WAIT in one pipeline, so that WAIT
// counts the replicas that have the new lease; if too few acknowledge, it
// releases the lease again.
func (b *Backend) acquireWait(ctx context.Context, script *script, name, owner string, keys []string, args []any) (fence.Token, error) {
	res, err := b.wait.run(ctx, b.client, script, resend, keys, args)
	if err != nil {
		b.reload.after(err)
		// Nothing ran, or the context ended with the outcome unknown:
		// lock.Client releases an ambiguous attempt when it gives up, and
		// its next attempt (same owner) finds the lease if it was taken.
		return 0, opError("acquire", name, err)
	}
	reply, err := res.script.Result()
	if err != nil {
		b.reload.after(err)
		if isRedisError(err) {
			return 0, acquireError(name, err)
		}
		// A transport error: the script may have run. Take the lease back
		// so that none is left behind.
		return 0, b.unreplicated(ctx, name, owner, -1, err)
	}
	token, err := parseAcquire(name, reply)
	if err != nil {
		return 0, err
	}
	got, err := res.wait.Result()
	if err != nil {
		return 0, b.unreplicated(ctx, name, owner, -1, err)
	}
	if got < int64(b.wait.replicas) {
		return 0, b.unreplicated(ctx, name, owner, int(got), nil)
	}
	return token, nil
}

// unreplicated releases the lease that was not acknowledged and describes
// it. The release is bounded by the caller's context like every call; if
// that has ended, ReleaseErr says so and the lease ends with its TTL.
func (b *Backend) unreplicated(ctx context.Context, name, owner string, got int, cause error) error {
	e := &ReplicationError{Op: "acquire", Name: name, Want: b.wait.replicas, Got: got, Timeout: b.wait.timeout, Err: cause}
	if err := b.release(ctx, name, owner); err != nil && !errors.Is(err, driver.ErrNotHeld) {
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
