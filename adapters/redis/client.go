package redis

import (
	"context"
	"math"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
)

// Client is the part of go-redis this package needs: Process, which sends
// one command (EVALSHA, EVAL, HMGET) with go-redis's routing, retries,
// hooks and cluster redirections.
//
// *goredis.Client, *goredis.ClusterClient, *goredis.Ring and
// goredis.UniversalClient satisfy it, and so do the failover clients:
// goredis.NewFailoverClient returns a *goredis.Client and
// goredis.NewFailoverClusterClient a *goredis.ClusterClient. A Store refuses
// a *goredis.Ring (see NewStore); a Backend accepts one.
//
// Any options will do: every call is bounded by its context even with
// go-redis's default ContextTimeoutEnabled: false, and the calls that must
// not be resent (fenced writes, Release) tell go-redis so.
type Client interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// Compile-time checks: every go-redis client kind is accepted.
var (
	_ Client = (*goredis.Client)(nil)
	_ Client = (*goredis.ClusterClient)(nil)
	_ Client = (*goredis.Ring)(nil)
	_ Client = goredis.UniversalClient(nil)

	// The failover constructors return the two types checked above.
	_ func(*goredis.FailoverOptions) *goredis.Client        = goredis.NewFailoverClient
	_ func(*goredis.FailoverOptions) *goredis.ClusterClient = goredis.NewFailoverClusterClient
)

// DefaultPrefix is the key prefix used when the options leave it empty.
const DefaultPrefix = "fencekit"

// keyEscaper makes a name safe inside a hash tag. Redis hashes the part
// between the first '{' and the first '}' after it; a '}' at the start of a
// name would make that part empty (so the whole key is hashed and a lock's two
// keys could land in different slots), and braces in the prefix would move
// the tag. Escaping '{', '}' and '%' keeps keys readable for ordinary names
// and stays injective, so two names never share a key.
var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func escapeKey(s string) string { return keyEscaper.Replace(s) }

// millis converts d to whole milliseconds, rounding up: the server must never
// keep a lease for less time than the caller asked for, since the caller's
// local deadline is computed from the requested TTL.
func millis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

// pttl turns a PTTL reply into a duration: 0 when the key has no expiry or
// none left (-1, -2), and at most the longest time.Duration, since Redis
// keeps TTLs in milliseconds, which overflow a Duration above about 292
// years.
func pttl(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms > int64(math.MaxInt64/time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// errNilClient refuses calls on a Backend or Store made with a nil client.
var errNilClient = fence.Invalid("nil redis client")

// ready refuses a call before anything is sent: a nil client, or a context
// that has already ended.
func ready(ctx context.Context, c Client) error {
	if c == nil {
		return errNilClient
	}
	return ctx.Err()
}

func (b *Backend) ready(ctx context.Context) error { return ready(ctx, b.client) }

func (s *Store) ready(ctx context.Context) error {
	if s.refused != nil {
		return s.refused
	}
	return ready(ctx, s.client)
}
