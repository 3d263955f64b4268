// Package lab is the body of the fencelab command: the scenarios that
// motivate fencekit, the chaos run, and the registry of backends they run on.
//
// It lives in a package, not in package main, so that an adapter in a module
// of its own (etcd, S3) can build a fencelab that also knows its backend
// without pulling its dependencies into the root module:
//
//	func init() { lab.RegisterBackend("etcd", openEtcd) }
//	func main() { os.Exit(lab.Main(os.Args[1:])) }
//
// Each scenario prints one line with what it observed. Main returns 1 when an
// outcome differs from the expected one, and 2 on a usage or setup error.
package lab

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Opener connects to a backend and returns its lock backend, its fenced
// store, and a function that releases what it opened.
type Opener func(ctx context.Context) (driver.Backend, fence.Store, func(), error)

var backends = map[string]Opener{}

// RegisterBackend makes a backend selectable with -backend name. Call it
// from an init function, before Main.
func RegisterBackend(name string, open Opener) { backends[name] = open }

// subcommands run instead of the scenarios when named as the first argument
// (fencelab chaos ...). Each returns the exit code.
var subcommands = map[string]func(args []string) int{}

var (
	backendName = flag.String("backend", "memory", "where locks and fenced data live")
	ttlFlag     = flag.Duration("ttl", 100*time.Millisecond, "lease TTL the scenarios use; pauses are a few TTLs long")
	timeout     = flag.Duration("timeout", time.Minute, "bound on the whole run")
)

// backendNames lists the registered backends. Each backend_*.go file
// registers itself in init, so adding one touches no other file.
func backendNames() []string {
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Main runs fencelab with the command-line arguments args (without the
// program name) and returns the exit code. Its flags live in
// flag.CommandLine, so it is meant to be called once, from a main function.
func Main(args []string) int {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(args[1:])
		}
	}
	// The backends register in init, after package variables are set, so
	// the list goes into the usage text here.
	flag.Lookup("backend").Usage += ": " + strings.Join(backendNames(), "|")
	if err := flag.CommandLine.Parse(args); err != nil {
		return 2
	}
	return runScenarios(os.Stdout, *backendName, *ttlFlag, *timeout)
}

// openBackend opens the named backend, or explains why it cannot.
func openBackend(ctx context.Context, name string) (driver.Backend, fence.Store, func(), error) {
	open, ok := backends[name]
	if !ok {
		var have []string
		for n := range backends {
			have = append(have, n)
		}
		sort.Strings(have)
		return nil, nil, nil, fmt.Errorf("unknown backend %q (have: %s)", name, strings.Join(have, ", "))
	}
	return open(ctx)
}

func runScenarios(out io.Writer, name string, ttl time.Duration, limit time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	b, s, closeFn, err := openBackend(ctx, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencelab:", err)
		return 2
	}
	defer closeFn()
	lab := &lab{backend: b, store: s, client: lock.New(b, nil), ttl: ttl, prefix: "fencelab:" + runID() + ":"}
	fmt.Fprintf(out, "fencelab on %s, lease TTL %v\n", name, ttl)
	failed, skipped := 0, 0
	var why string
	for i, sc := range scenarios {
		res := sc.run(ctx, lab)
		status := "ok"
		switch {
		case res.err != nil:
			status = "ERROR: " + res.err.Error()
			failed++
		case res.skipped != "":
			status = "SKIPPED: " + res.skipped
			res.observed = "not run"
			skipped++
			why = res.skipped
		case res.mismatch != "":
			status = "MISMATCH: " + res.mismatch
			failed++
		}
		fmt.Fprintf(out, "%d. %s: %s [%s]\n", i+1, sc.title, res.observed, status)
	}
	if failed > 0 {
		fmt.Fprintf(out, "%d of %d scenarios did not behave as expected\n", failed, len(scenarios))
		return 1
	}
	if skipped > 0 {
		fmt.Fprintf(out, "all %d scenarios that ran behaved as expected; %d skipped (%s)\n", len(scenarios)-skipped, skipped, why)
		return 0
	}
	fmt.Fprintf(out, "all %d scenarios behaved as expected\n", len(scenarios))
	return 0
}

// runID is a short random name for one run: hex digits, safe in a key or a
// SQL identifier.
func runID() string {
	o, err := lock.NewOwner()
	if err != nil {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return o[:12]
}
