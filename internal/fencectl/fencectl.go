// Package fencectl is the code of the fencectl command: parsing, the
// commands, and the backends of the core module (Redis, PostgreSQL,
// MySQL). The one fencectl binary, cmd/fencectl (a module of its own),
// runs it with the DynamoDB, etcd and NATS backends added with Register by
// packages of their adapters' modules (adapters/dynamodb/fencectlbackend,
// adapters/etcd/fencectlbackend, adapters/nats/fencectlbackend), so that
// the core module's graph never holds those clients.
package fencectl

import (
	"context"
	"io"
	"sort"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
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
	// Title names the backend in --help's heading of its flags, such as
	// "etcd" or "NATS JetStream KV".
	Title string
	// Flag names the flag that gives the server (such as
	// "etcd-endpoints"); Env the environment variable that is its
	// default; Help the flag's help text.
	Flag, Env, Help string
	// Flags are the backend's flags besides Flag (NATS: its buckets),
	// given to Open by name in Options.Flags. Each is refused on the
	// command line when another backend is chosen.
	Flags []KindFlag
	// Prefixes says that --prefix and --store-prefix apply to the backend;
	// DefaultPrefix is then what it takes when they are not given (the
	// adapter's default), for --help.
	Prefixes      bool
	DefaultPrefix string
	// DefaultStorePrefix, when not nil, is --store-prefix's default, for
	// --help, where it differs from DefaultPrefix (DynamoDB: a Store has
	// no prefix unless given one, a Backend has one).
	DefaultStorePrefix *string
	// Open connects to the server and returns the target.
	Open func(ctx context.Context, o Options) (*Target, error)
}

// KindFlag is a string flag of a backend added with Register.
type KindFlag struct {
	// Name is the flag's name without dashes; Env the environment
	// variable that is its default ("" for none); Help its help text.
	Name, Env, Help string
}

// Options are what Kind.Open gets from the command line.
type Options struct {
	// Addr is the value of the Kind's Flag (or Env): the server.
	Addr string
	// Prefix and StorePrefix are --prefix and --store-prefix; PrefixSet
	// and StorePrefixSet say whether the command line gave them (their
	// defaults are Redis's "fencekit").
	Prefix, StorePrefix       string
	PrefixSet, StorePrefixSet bool
	// Flags are the values of the Kind's Flags, by name.
	Flags map[string]string
}

// Target is what fencectl needs of a backend added with Register.
type Target struct {
	Backend driver.Backend
	// Store is the fenced store that fence and release --fence read and
	// raise. nil when the command line does not say where it is: NoStore
	// then says which flag does, and those commands refuse with it.
	Store   fence.Store
	NoStore string
	// StoreAt says where Store is, for the operator: "bucket B, prefix
	// P". fence and release print it, so that a store looked for in the
	// wrong place shows.
	StoreAt string
	// List returns the held locks whose names start with prefix, sorted
	// by name.
	List func(ctx context.Context, prefix string) ([]lock.Info, error)
	// PermitNames names the permit names (semaphores, read-write locks)
	// in use whose names start with prefix; fencectl inspects each with a
	// permit kind. nil where the backend has no permits.
	PermitNames func(ctx context.Context, prefix string) ([]string, error)
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
// The backends are kept by name, so that messages and --help list them in
// one order whatever the order of the init functions.
func Register(k Kind) {
	kinds = append(kinds, k)
	sort.SliceStable(kinds, func(i, j int) bool { return kinds[i].Name < kinds[j].Name })
}

// openKind opens a registered backend.
func openKind(ctx context.Context, k Kind, c *config) (*target, error) {
	addr := c.extraURLs[k.Name]
	if addr == "" {
		return nil, usagef("--backend %s needs --%s or %s", k.Name, k.Flag, k.Env)
	}
	o := Options{Addr: addr, Prefix: c.prefix, StorePrefix: c.storePrefix, PrefixSet: c.set["prefix"], StorePrefixSet: c.set["store-prefix"], Flags: map[string]string{}}
	for _, f := range k.Flags {
		o.Flags[f.Name] = c.kindFlags[f.Name]
	}
	t, err := k.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	tg := &target{kind: k.Name, backend: t.Backend, store: t.Store, noStore: t.NoStore, storeAt: t.StoreAt, list: t.List, permitNames: t.PermitNames, waiters: t.Waiters, noBump: t.NoBump, close: t.Close}
	if t.Bump != nil {
		tg.bump = func(ctx context.Context, by int64) (bumpResult, error) {
			r, err := t.Bump(ctx, by)
			return bumpResult{Rows: r.Rows, MaxToken: r.MaxToken, summary: r.Summary}, err
		}
	}
	return tg, nil
}
