package redis_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// serverReply is an error reply from Redis, as go-redis reports one.
type serverReply string

func (e serverReply) Error() string { return string(e) }
func (serverReply) RedisError()     {}

var _ goredis.Error = serverReply("")

// replyClient is a fake Client: it answers the first len(errs) commands
// with those error replies, and every later acquire script with a fresh
// token.
type replyClient struct {
	mu   sync.Mutex
	errs []error
	sent int
}

func (c *replyClient) Process(_ context.Context, cmd goredis.Cmder) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent++
	if len(c.errs) > 0 {
		cmd.SetErr(c.errs[0])
		c.errs = c.errs[1:]
		return cmd.Err()
	}
	if plain, ok := cmd.(*goredis.Cmd); ok {
		plain.SetVal([]any{"new", "1234567"})
		return nil
	}
	cmd.SetErr(errors.New("replyClient: unexpected command"))
	return cmd.Err()
}

// TestServerRepliesClassified: a reply that means "try again" (the server
// loading, busy, failing over, a cluster slot moving) is transient, so
// lock.Client retries it; every other reply (authentication, permission,
// wrong key type, a script error) is permanent and keeps its cause.
func TestServerRepliesClassified(t *testing.T) {
	t.Parallel()
	for reply, transient := range map[string]bool{
		"LOADING Redis is loading the dataset in memory":                                   true,
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL":               true,
		"TRYAGAIN Multiple keys request during rehashing of slot":                          true,
		"CLUSTERDOWN The cluster is down":                                                  true,
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.": true,
		"READONLY You can't write against a read only replica.":                            true,
		"NOREPLICAS Not enough good replicas to write.":                                    true,
		"NOAUTH Authentication required.":                                                  false,
		"WRONGPASS invalid username-password pair or user is disabled.":                    false,
		"NOPERM this user has no permissions to run the 'evalsha' command":                 false,
		"WRONGTYPE Operation against a key holding the wrong kind of value":                false,
		"ERR user_script:1: Script attempted to access nonexistent global variable":        false,
		"ERR increment or decrement would overflow":                                        false,
	} {
		b := fenceredis.NewBackend(&replyClient{errs: []error{serverReply(reply)}}, nil)
		_, err := acquire(testCtx(t), b, "job", newOwner(t), time.Second)
		require.ErrorContains(t, err, reply)
		require.Equal(t, transient, errors.Is(err, driver.ErrTransient), "%q: transient", reply)
		require.Equal(t, transient, driver.Retryable(err), "%q: retryable", reply)
		var sr serverReply
		require.ErrorAs(t, err, &sr, "%q: the cause is kept", reply)
	}
}

// TestAcquireRetriesTransientReply: lock.Client.Acquire retries a LOADING
// and a BUSY reply, and takes the lock on the third attempt.
func TestAcquireRetriesTransientReply(t *testing.T) {
	t.Parallel()
	fake := &replyClient{errs: []error{
		serverReply("LOADING Redis is loading the dataset in memory"),
		serverReply("BUSY Redis is busy running a script. You can only call SCRIPT KILL or FUNCTION KILL."),
	}}
	c := lock.New(fenceredis.NewBackend(fake, nil), &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1234567, lease.Token())
	require.Equal(t, 3, fake.sent)
}

// acquireBackground runs lock.Client.Acquire under context.Background, as
// applications do, and fails t if it has not returned within a minute: a
// permanent error must end it at once, not after the context.
func acquireBackground(t *testing.T, b driver.Backend) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := lock.New(b, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}).Acquire(context.Background(), "job", time.Minute)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Acquire under context.Background still retrying after a minute")
		return nil
	}
}

// TestAcquireFailsFastOnWrongType: the lease key holds a list (another
// program's key, a prefix clash). Acquire under context.Background returns
// at once with the WRONGTYPE reply as its cause, after one attempt.
func TestAcquireFailsFastOnWrongType(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	require.NoError(t, c.RPush(testCtx(t), b.LeaseKey("job"), "not a lease").Err())
	err := acquireBackground(t, b)
	require.ErrorIs(t, err, lock.ErrNotAcquired)
	require.ErrorContains(t, err, "WRONGTYPE")
	require.ErrorContains(t, err, "after 1 attempt")
	t.Logf("acquire on a key of the wrong type: %v", err)
}

// TestAcquireFailsFastWithoutPermission: a user whose ACL forbids scripts,
// and a wrong password. Acquire under context.Background returns at once
// with NOPERM, and with WRONGPASS.
func TestAcquireFailsFastWithoutPermission(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	_, err := srv.Do("ACL", "SETUSER", "noscripts", "on", ">secret", "~*", "+@all", "-evalsha", "-eval")
	require.NoError(t, err)
	for _, login := range []struct{ user, pass, want string }{
		{"noscripts", "secret", "NOPERM"},
		{"noscripts", "wrong", "WRONGPASS"},
	} {
		user := login.user + "/" + login.pass
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: login.user, Password: login.pass})
		t.Cleanup(func() { _ = c.Close() })
		err := acquireBackground(t, fenceredis.NewBackend(c, nil))
		require.ErrorIs(t, err, lock.ErrNotAcquired, user)
		require.ErrorContains(t, err, "not retried", user)
		require.True(t, strings.Contains(err.Error(), login.want), "%s: %v, want %s", user, err, login.want)
		t.Logf("acquire as %s: %v", user, err)
	}
}

// busyRecorder passes Acquire through and closes busy at the first attempt
// that failed with a BUSY reply.
type busyRecorder struct {
	driver.Backend
	once sync.Once
	busy chan struct{}
	seen error
}

func (r *busyRecorder) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := r.Backend.Acquire(ctx, req)
	if err != nil && strings.Contains(err.Error(), "BUSY") {
		r.once.Do(func() { r.seen = err; close(r.busy) })
	}
	return g, err
}

// TestBusyServerIsRetried runs a script that never ends on a real server, so
// that it answers BUSY to everyone else. lock.Client.Acquire, on a client
// with default options, keeps retrying; once the script is killed it takes
// the lock.
func TestBusyServerIsRetried(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t, "--busy-reply-threshold", "20")
	c := srv.Client(t) // default options
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	warm := newOwner(t) // a pooled connection and the script cached
	_, err := acquire(ctx, b, "warm", warm, time.Minute)
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "warm", warm))

	slow := srv.Client(t)
	slowDone := make(chan error, 1)
	go func() { slowDone <- slow.Eval(context.Background(), "while true do end", nil).Err() }()
	eventually(t, 10*time.Second, "the server answers BUSY", func() bool {
		_, err := srv.Do("PING")
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	})

	rec := &busyRecorder{Backend: b, busy: make(chan struct{})}
	killed := make(chan error, 1)
	go func() {
		<-rec.busy
		_, err := srv.Do("SCRIPT", "KILL")
		killed <- err
	}()
	lease, err := lock.New(rec, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}).Acquire(ctx, "job", time.Minute)
	require.NoError(t, err, "acquire once the busy script is killed")
	require.NoError(t, <-killed)
	require.ErrorIs(t, rec.seen, driver.ErrTransient)
	require.Error(t, <-slowDone, "the slow script was killed")
	t.Logf("retried after %v, then took the lock with token %d", rec.seen, lease.Token())
	require.NoError(t, lease.Release(ctx))
}
