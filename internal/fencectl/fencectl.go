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
	// NoBump says why bump does not apply.
	NoBump string
	// Close releases the connections.
	Close func()
}

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
	return &target{kind: k.Name, backend: t.Backend, store: t.Store, list: t.List, waiters: t.Waiters, noBump: t.NoBump, close: t.Close}, nil
}
