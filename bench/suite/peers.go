package suite

import (
	"context"
	"errors"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

// The peer libraries, used the way their READMEs show: redislock's
// Obtain (no retry by default) and Release; redsync's NewMutex with one
// pool on the single node, TryLockContext (one attempt) and UnlockContext.

func init() {
	addLockImpl(lockImpl{name: "bsm/redislock", baseline: true, newWorker: newRedislockWorker})
	addLockImpl(lockImpl{name: "go-redsync", order: 1, newWorker: newRedsyncWorker})
}

type redislockWorker struct{ c *redislock.Client }

func newRedislockWorker(e *Env, _ int) cycle {
	return redislockWorker{c: e.redislock()}
}

func (w redislockWorker) cycle(ctx context.Context, key string) (bool, error) {
	l, err := w.c.Obtain(ctx, key, TTL, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, l.Release(ctx)
}

type redsyncWorker struct{ rs *redsync.Redsync }

func newRedsyncWorker(e *Env, _ int) cycle {
	return redsyncWorker{rs: e.redsync()}
}

func (w redsyncWorker) cycle(ctx context.Context, key string) (bool, error) {
	m := w.rs.NewMutex(key, redsync.WithExpiry(TTL), redsync.WithTries(1))
	err := m.TryLockContext(ctx)
	if err != nil {
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return false, nil
		}
		return false, err
	}
	ok, err := m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reported false")
	}
	return true, err
}

// redislock returns one redislock client over the shared go-redis client.
func (e *Env) redislock() *redislock.Client { return redislock.New(e.Redis) }

// redsync returns a Redsync with one pool: the single node.
func (e *Env) redsync() *redsync.Redsync { return redsync.New(redsyncPool(e.Redis)) }

func redsyncPool(c *goredis.Client) redsyncredis.Pool { return redsyncgoredis.NewPool(c) }
