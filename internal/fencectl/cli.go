package fencectl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Exit codes; see the package documentation.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	exitNothing = 3
)

// usageError is a mistake in the command line, or a request the backend
// cannot serve: exit code 2.
type usageError struct {
	msg string
	err error // the refusal it stands for, if any (Refused)
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// nothingError means there was nothing to do: exit code 3.
type nothingError struct{ msg string }

func (e *nothingError) Error() string { return e.msg }

// keyList collects a repeated --fence flag.
type keyList []string

func (k *keyList) String() string { return strings.Join(*k, ",") }

func (k *keyList) Set(v string) error {
	*k = append(*k, v)
	return nil
}

// config is the parsed command line.
type config struct {
	backend, redisURL, postgresURL string
	mysqlURL                       string
	urlFlags                       []string          // the kinds whose URL flags the command line gives
	extraURLs                      map[string]string // a registered kind's server, by kind
	kindFlags                      map[string]string // a registered kind's other flags, by flag name
	set                            map[string]bool   // the flags the command line gives
	redisCluster                   bool
	prefix, storePrefix            string
	leaseTable, storeTable         string
	json                           bool
	timeout                        time.Duration

	force, noFence bool
	fences         keyList
	allowUnwritten bool
	owner          string
	by             int64
	interval       time.Duration
	count          int

	command string
	args    []string
}

// commandFlags lists the flags each command accepts besides the global
// ones.
var commandFlags = map[string][]string{
	"inspect": nil,
	"list":    nil,
	"fence":   nil,
	"release": {"force", "fence", "no-fence", "owner", "allow-unwritten"},
	"bump":    {"by"},
	"watch":   {"interval", "count"},
}

// commandArgs is each command's number of arguments: at least, at most.
var commandArgs = map[string][2]int{
	"inspect": {1, 1},
	"list":    {0, 1},
	"fence":   {1, 1},
	"release": {1, 1},
	"bump":    {0, 0},
	"watch":   {0, 1},
}

const usageText = `usage: fencectl [flags] COMMAND [ARGS]

commands:
  inspect NAME                     who holds NAME: the lock's holder (owner, metadata, token,
                                   TTL), or the permits of the semaphore or read-write lock
                                   NAME (shape, waiters, each permit's owner, kind, token, TTL)
  list [PREFIX]                    the held locks and the permits in use, those whose names
                                   start with PREFIX: one row per holder (KIND: lock,
                                   semaphore N, read or write), with its waiters
  fence KEY                        the fence of KEY in the fenced store, and whether it holds a value
  release --force NAME --fence KEY [--fence KEY...] [--owner OWNER]
                                   raise the fences of the KEYs past the holder's token,
                                   then delete the lease (--no-fence: no keys); on a
                                   semaphore or read-write lock, release one permit: the
                                   one of --owner OWNER, needed when several hold
  bump --by N                      after a restore (SQL, NATS, DynamoDB): raise every token by N
  watch [PREFIX] [--interval D] [--count N]
                                   a live table of the held locks and permits (kind, token,
                                   TTL, metadata, waiters in line), redrawn every D;
                                   q or Ctrl-C quits

exit codes: 0 done, 1 failed, 2 usage (release: several holders and no --owner;
a --fence KEY with no record in the store, without --allow-unwritten),
3 nothing to do (release of a free lock, or of an --owner that holds nothing there)

The backend is the one whose server flag the command line gives, else the one
whose variable is set; --backend chooses when several are. A backend's own
flags (listed under it) are refused with another backend.
`

// parse reads args into a config. getenv supplies the URLs' defaults.
func parse(args []string, stderr io.Writer, getenv func(string) string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("fencectl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	groups := flagGroups()
	fs.Usage = func() { printUsage(stderr, fs, groups) }
	fs.StringVar(&c.backend, "backend", "", backendHelp())
	fs.StringVar(&c.redisURL, "redis-url", getenv("FENCEKIT_REDIS_URL"), "Redis URL (default $FENCEKIT_REDIS_URL)")
	fs.StringVar(&c.postgresURL, "postgres-url", getenv("FENCEKIT_POSTGRES_URL"), "PostgreSQL URL (default $FENCEKIT_POSTGRES_URL); postgres or postgres-sqldb")
	fs.StringVar(&c.mysqlURL, "mysql-url", getenv("FENCEKIT_MYSQL_URL"), "MySQL/MariaDB DSN, user:password@tcp(host:port)/database (default $FENCEKIT_MYSQL_URL)")
	c.extraURLs = map[string]string{}
	c.kindFlags = map[string]string{}
	flagKind := map[string]string{"redis-url": "redis", "postgres-url": "postgres", "mysql-url": "mysql"}
	extra := map[string]*string{}
	kindFlags := map[string]*string{}
	for _, k := range kinds {
		extra[k.Name] = fs.String(k.Flag, getenv(k.Env), k.Help+" (default $"+k.Env+")")
		flagKind[k.Flag] = k.Name
		for _, f := range k.Flags {
			help := f.Help
			if f.Env != "" {
				help += " (default $" + f.Env + ")"
			}
			kindFlags[f.Name] = fs.String(f.Name, getenv(f.Env), help)
		}
	}
	fs.BoolVar(&c.redisCluster, "redis-cluster", false, "the Redis URL names a Cluster: redis://host:port?addr=host2:port2&addr=...")
	fs.StringVar(&c.prefix, "prefix", "fencekit", "key prefix of the locks (BackendOptions.Prefix): "+prefixKinds(false))
	fs.StringVar(&c.storePrefix, "store-prefix", "fencekit", "key prefix of the fenced store (StoreOptions.Prefix): "+prefixKinds(true))
	fs.StringVar(&c.leaseTable, "lease-table", "fencekit_leases", "lease table, table or schema.table (MySQL: database.table)")
	fs.StringVar(&c.storeTable, "store-table", "fencekit_store", "store table, table or schema.table (MySQL: database.table)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of text")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on the whole command (above zero)")
	fs.BoolVar(&c.force, "force", false, "release: evict the live holder (required)")
	fs.Var(&c.fences, "fence", "release: a store key the holder writes; its fence is raised first (repeatable)")
	fs.BoolVar(&c.noFence, "no-fence", false, "release: name no keys to fence (the evicted holder may still write)")
	fs.BoolVar(&c.allowUnwritten, "allow-unwritten", false, "release: fence --fence keys that have no record in the store yet (never written there);\nwithout it such a key is refused, since a store looked for in the wrong place shows every key so")
	fs.StringVar(&c.owner, "owner", "", "release: the owner whose lease or permit to evict (needed where several hold: a semaphore's or read-write lock's permits)")
	fs.Int64Var(&c.by, "by", 0, "bump: how much to raise every token")
	fs.DurationVar(&c.interval, "interval", time.Second, "watch: time between refreshes (above zero)")
	fs.IntVar(&c.count, "count", 0, "watch: stop after N refreshes (0: until q or Ctrl-C)")

	// Flags may follow the command and its arguments: parse, take one
	// positional argument, parse on.
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			pos = append(pos, rest[1:]...)
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return nil, usagef("no command")
	}
	c.command, c.args = pos[0], pos[1:]
	allowed, ok := commandFlags[c.command]
	if !ok {
		return nil, usagef("unknown command %q (have: inspect, list, fence, release, bump, watch)", c.command)
	}
	n := commandArgs[c.command]
	if len(c.args) < n[0] || len(c.args) > n[1] {
		return nil, usagef("%s takes %s; got %q", c.command, argsWanted(n), c.args)
	}
	var misplaced []string
	for name, v := range extra {
		c.extraURLs[name] = *v
	}
	for name, v := range kindFlags {
		c.kindFlags[name] = *v
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		c.set[f.Name] = true
		if kind, ok := flagKind[f.Name]; ok {
			c.urlFlags = append(c.urlFlags, kind)
		}
		if isCommandFlag(f.Name) && !contains(allowed, f.Name) {
			misplaced = append(misplaced, "--"+f.Name)
		}
	})
	if len(misplaced) > 0 {
		return nil, usagef("%s does not take %s", c.command, strings.Join(misplaced, ", "))
	}
	if c.timeout <= 0 {
		// A context that has already ended would fail every command with
		// "context deadline exceeded", which reads as a server fault.
		return nil, usagef("--timeout must be above zero; got %v", c.timeout)
	}
	if c.interval <= 0 {
		return nil, usagef("--interval must be above zero; got %v", c.interval)
	}
	if c.count < 0 {
		return nil, usagef("--count must be zero (no end) or more; got %d", c.count)
	}
	return c, nil
}

// backendHelp is the help of --backend: every backend fencectl has.
func backendHelp() string {
	names := []string{"redis", "postgres", "mysql", "postgres-sqldb (PostgreSQL through database/sql and adapters/sqldb)"}
	for _, k := range kinds {
		names = append(names, k.Name)
	}
	return orList(names) + "; needed only when several servers are named"
}

// kindNames lists the registered backends, each after ", ", for messages.
func kindNames() string {
	var b strings.Builder
	for _, k := range kinds {
		b.WriteString(", " + k.Name)
	}
	return b.String()
}

func argsWanted(n [2]int) string {
	switch {
	case n[0] == n[1] && n[0] == 0:
		return "no arguments"
	case n[0] == n[1]:
		return fmt.Sprintf("%d argument", n[0])
	}
	return fmt.Sprintf("%d to %d arguments", n[0], n[1])
}

func isCommandFlag(name string) bool {
	for _, fl := range commandFlags {
		if contains(fl, name) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// run is fencectl with args; it returns the exit code. stdin is read by
// watch only (q quits).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	c, err := parse(args, stderr, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		var (
			ctx    context.Context
			cancel context.CancelFunc
		)
		if c.command == "watch" {
			// watch runs until the operator stops it; --timeout bounds
			// each refresh instead.
			ctx, cancel = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		} else {
			ctx, cancel = context.WithTimeout(context.Background(), c.timeout)
		}
		defer cancel()
		err = execute(ctx, c, stdin, stdout)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "fencectl:", err)
	var usage *usageError
	var nothing *nothingError
	switch {
	case errors.As(err, &usage), errors.Is(err, fence.ErrInvalid):
		return exitUsage
	case errors.As(err, &nothing):
		return exitNothing
	}
	return exitFailed
}

// execute opens the backend and runs the command.
func execute(ctx context.Context, c *config, in io.Reader, out io.Writer) error {
	openCtx, cancel := context.WithTimeout(ctx, c.timeout)
	t, err := open(openCtx, c)
	cancel()
	if err != nil {
		return err
	}
	defer t.close()
	p := &printer{out: out, json: c.json}
	switch c.command {
	case "inspect":
		return inspect(ctx, t, p, c.args[0])
	case "list":
		prefix := ""
		if len(c.args) == 1 {
			prefix = c.args[0]
		}
		return list(ctx, t, p, prefix)
	case "fence":
		return showFence(ctx, t, p, c.args[0])
	case "release":
		return release(ctx, t, p, c, c.args[0])
	case "bump":
		return bump(ctx, t, p, c.by)
	case "watch":
		prefix := ""
		if len(c.args) == 1 {
			prefix = c.args[0]
		}
		return watch(ctx, t, out, in, c, prefix)
	}
	return usagef("unknown command %q", c.command)
}
