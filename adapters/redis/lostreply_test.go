package redis_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// evalshaCalls is how many EVALSHA commands the server has executed.
func evalshaCalls(t *testing.T, srv *testkit.RedisServer) int {
	line := srv.Info("commandstats", "cmdstat_evalsha")
	for _, f := range strings.Split(line, ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// TestLostReplies drops the reply to a request after the server executed it,
// and cuts the connection, as a network failure at the worst moment does.
// go-redis (default options) would send the command again. A fenced write
// must not be resent: if a newer holder wrote in between, the resend would be
// refused as stale, reporting "nothing changed" for a write that landed. A
// release must not be either: the resend would answer "not held", and the
// caller would take its own successful release for a lost lease. So these
// come back as a network error (outcome unknown), sent exactly once. An
// acquire is resent, and the resend by the same owner recovers the same
// token.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	px := testkit.NewProxy(t, srv.Addr())
	c := goredis.NewClient(&goredis.Options{Addr: px.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	direct := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	s := fenceredis.NewStore(c, nil)

	// Cache the scripts first, so each call below is one EVALSHA.
	o := newOwner(t)
	_, err := acquire(ctx, b, "warm", o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "warm", o))
	require.NoError(t, s.Put(ctx, "warm", 1, nil))
	require.NoError(t, s.Advance(ctx, "warm", 1))
	require.NoError(t, s.Delete(ctx, "warm", 1))
	held := newOwner(t)
	_, err = acquire(ctx, b, "held", held, time.Minute)
	require.NoError(t, err)

	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"Put", func() error { return s.Put(ctx, "k", 5, []byte("v5")) }},
		{"Advance", func() error { return s.Advance(ctx, "k", 6) }},
		{"Delete", func() error { return s.Delete(ctx, "k", 7) }},
		{"Release", func() error { return release(ctx, b, "held", held) }},
	} {
		// A pooled connection, so that the dropped reply is the script's and
		// not a new connection's handshake.
		require.NoError(t, c.Ping(ctx).Err())
		before := evalshaCalls(t, srv)
		dropped := px.DropNextReply()
		err := op.run()
		<-dropped
		require.Error(t, err, op.name)
		require.NotErrorIs(t, err, fence.ErrStale, op.name)
		require.NotErrorIs(t, err, lock.ErrNotHeld, op.name)
		require.Equal(t, before+1, evalshaCalls(t, srv), "%s was sent again after its reply was lost", op.name)
		t.Logf("%s with its reply lost: %v (sent once)", op.name, err)
	}
	// Each call was applied, though its caller could not know.
	info, err := inspect(ctx, fenceredis.NewBackend(direct, nil), "held")
	require.NoError(t, err)
	require.False(t, info.Held, "the release ran")
	rec, err := fenceredis.NewStore(direct, nil).Get(ctx, "k")
	require.ErrorIs(t, err, fence.ErrNotFound, "record %+v: %q", rec, rec.Value)
	require.Equal(t, fence.Token(7), rec.Fence)

	require.NoError(t, c.Ping(ctx).Err())
	before := evalshaCalls(t, srv)
	dropped := px.DropNextReply()
	a := newOwner(t)
	tok, err := acquire(ctx, b, "job", a, time.Minute)
	<-dropped
	require.NoError(t, err, "the resent acquire recovers the lease")
	require.Equal(t, before+2, evalshaCalls(t, srv), "Acquire is sent again after a lost reply")
	info, err = inspect(ctx, fenceredis.NewBackend(direct, nil), "job")
	require.NoError(t, err)
	require.Equal(t, a, info.Owner)
	require.Equal(t, tok, info.Token, "the resend returned the token the first send minted")
}
