// Package fencectl is the code of the fencectl command: parsing, the
// commands, and the backends of the core module (Redis, PostgreSQL,
// MySQL). cmd/fencectl runs it; a module of its own (adapters/etcd) adds a
// backend with Register and runs it from a main of its own, so that the
// core module's graph never holds that backend's client.
package fencectl

import (
	"context"
	"io"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Main is fencectl with args; it returns the exit code. stdin is read by
// watch only (q quits).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	// go-redis logs every failed dial to stderr through a global logger;
	// fencectl reports the error itself, in one line.
	goredis.SetLogger(silentRedisLog{})
	return run(args, stdin, stdout, stderr, getenv)
}

// silentRedisLog is a go-redis logger that writes nothing.
type silentRedisLog struct{}

func (silentRedisLog) Printf(context.Context, string, ...any) {}

// Kind is a backend that a fencectl binary adds to the built-in ones.
type Kind struct {
	// Name is the --backend value, such as "etcd".
	Name string
	// Flag names the flag that gives the server (such as
	// "etcd-endpoints"); Env the environment variable that is its
	// default; Help the flag's help text.
	Flag, Env, Help string
	// Open connects to the server at addr (the flag's value) and returns
	// the target. prefix and storePrefix are --prefix and --store-prefix.
	Open func(ctx context.Context, addr, prefix, storePrefix string) (*Target, error)
}

// Target is what fencectl needs of a backend added with Register.
type Target struct {
	Backend lock.Backend
	Store   fence.Store
	// List returns the held locks whose names start with prefix, sorted
	// by name.
	List func(ctx context.Context, prefix string) ([]lock.Info, error)
	// Waiters counts, for each of names in order, the waiters standing
	// in its lock's queue; watch shows them as WAITERS. nil where the
	// backend has no queue to read.
	Waiters func(ctx context.Context, names []string) ([]int64, error)
	// Bump raises the backend's tokens by by after a restore, so that no
	// token issued before is issued again; nil where bump does not apply.
	Bump func(ctx context.Context, by int64) (BumpResult, error)
	// NoBump says why bump does not apply, when Bump is nil.
	NoBump string
	// Close releases the connections.
	Close func()
}

// BumpResult is what a Target's Bump did.
type BumpResult struct {
	// Rows is the number of records the bump raised or removed.
	Rows int64
	// MaxToken is the highest token afterwards: every token issued from
	// then on is above it.
	MaxToken fence.Token
	// Summary is the line fencectl prints for it without --json.
	Summary string
}

// Refused marks err as a request that the backend refused with nothing
// changed: fencectl prints it and exits with 2, as for a usage error.
// errors.Is still matches err's sentinels.
func Refused(err error) error { return &usageError{msg: err.Error(), err: err} }

// kinds are the backends added with Register.
var kinds []Kind

// Register adds a backend; call it before Main, from an init function.
func Register(k Kind) { kinds = append(kinds, k) }

// openKind opens a registered backend.
func openKind(ctx context.Context, k Kind, c *config) (*target, error) {
	addr := c.extraURLs[k.Name]
	if addr == "" {
		return nil, usagef("--backend %s needs --%s or %s", k.Name, k.Flag, k.Env)
	}
	t, err := k.Open(ctx, addr, c.prefix, c.storePrefix)
	if err != nil {
		return nil, err
	}
	tg := &target{kind: k.Name, backend: t.Backend, store: t.Store, list: t.List, waiters: t.Waiters, noBump: t.NoBump, close: t.Close}
	if t.Bump != nil {
		tg.bump = func(ctx context.Context, by int64) (bumpResult, error) {
			r, err := t.Bump(ctx, by)
			return bumpResult{Rows: r.Rows, MaxToken: r.MaxToken, summary: r.Summary}, err
		}
	}
	return tg, nil
}
