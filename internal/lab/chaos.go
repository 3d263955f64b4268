package lab

import (
	"context"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/lock/driver"
)

func init() {
	subcommands["chaos"] = func(args []string) int { return runChaos(args, os.Stdout, os.Stderr) }
}

const chaosUsage = `usage: fencelab chaos [-backend memory|redis|postgres] [-duration D] [-workers N]
                      [-keys K] [-ttl T] [-seed S] [-unfenced] [-polling] [-faults=false]
                      [-sets [-transfer] [-stall-limit D]]
                      [-redis-url URL] [-postgres-url URL]
                      [-kill-server-every D [-kill-downtime D]]
                      [-shape lock|rw|semaphore [-permits N]] [-resume]

Workers increment shared counters under the lock (Advance, Get, fenced Put of
value+1) while random pauses longer than the TTL freeze them and, for redis and
postgres, a proxy started in this process delays, cuts and loses traffic to the
server. With -sets each cycle takes the locks of 2 or 3 of the keys at once
(DoMulti; -keys defaults to 4 then, so that sets overlap and come in opposite
orders) and increments every key of the set, each write fenced by its own
name's token; with -transfer it moves an amount from one counter of the set to
another instead, and the checker follows each counter's chain of writes for
lost updates and counts torn transfers (one half landed). The history is
checked with porcupine against a fenced-register model and a
token-monotonicity model, and counted directly; it is also checked for two
live holders of one name and, with -sets, for a loss of progress (a run that
acquired no set, or none in its last -stall-limit). The exit code is 0 when
nothing was violated, 1 when something was (with -unfenced, lost increments
are expected: they show the checker can fail), 2 on a usage or setup error.

With -kill-server-every, the run starts throwaway servers of its own (the
URLs are not used) and kills one about that often: for redis the lock
server (SIGKILL, restarted without persistence, so every lease and counter
is gone) while the fenced counters live on a second redis-server; for
postgres the one server (immediate stop, restarted with crash recovery).

With -shape rw or -shape semaphore, the workers take read-write or semaphore
permits instead of the lock (a backend that answers ErrUnsupported for them
ends the run with exit code 2): writers increment under their permit's token, readers (rw) read under a read
permit, and the run also checks the shape: no permits certainly live beside
permits the shape forbids, no live read above its PriorWriter, rising tokens
(with -kill-server-every those are figures: a restart may forget permits).

With -resume, each cycle increments its key once, then drops its lease
unreleased as a process that dies would, and a new client adopts the lease by
its saved owner (Client.Resume) and increments the key again with the same
token; a pause may make the lease lapse first, and the resume must then be
refused (ErrNotHeld). The run also checks that a resumed lease has the token
of the lease it adopted, the latest granted to its owner, that no resume
succeeds after another owner was granted the lock, and that none refuses a
lease still certainly live. It takes one lock per cycle: not with -sets,
-transfer or -shape rw|semaphore.

`

// runChaos is `fencelab chaos`.
func runChaos(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencelab chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, chaosUsage)
		fs.PrintDefaults()
	}
	var (
		duration   = fs.Duration("duration", 3*time.Second, "how long workers start new cycles")
		workers    = fs.Int("workers", 4, "concurrent workers")
		keys       = fs.Int("keys", 0, "shared counters, each with its own lock (0: 3, or 4 with -sets)")
		sets       = fs.Bool("sets", false, "take a set of 2-3 locks per cycle with DoMulti and increment each of its counters")
		transfer   = fs.Bool("transfer", false, "with -sets (implied): move an amount between two counters of the set instead of incrementing each")
		stallLimit = fs.Duration("stall-limit", 0, "with -sets: the run fails when no set was acquired for this long before its end (0: the largest of 2 op timeouts, 20 TTLs and 5s)")
		seed       = fs.Uint64("seed", 0, "random seed for pauses and faults (0: random; the run is not replayable, timing is real)")
		unfenced   = fs.Bool("unfenced", false, "write without fencing (lock only, plain writes): the checker must report lost increments")
		polling    = fs.Bool("polling", false, "workers poll for their locks instead of waiting in line (lock.QueueOptions.Polling), as every acquire did before queued waiting")
		pause      = fs.Float64("pause", 0.15, "probability that a cycle freezes its worker for 1.2 to 2.5 TTLs")
		faults     = fs.Bool("faults", true, "for redis and postgres: run the client through an in-process proxy that injects delays, cuts and lost replies")
		faultEvery = fs.Duration("fault-every", 500*time.Millisecond, "mean time between network faults")
		killEvery  = fs.Duration("kill-server-every", 0, "for redis and postgres: kill and restart a throwaway server about this often (0: never)")
		downtime   = fs.Duration("kill-downtime", 200*time.Millisecond, "how long a killed server stays down")
		shape      = fs.String("shape", "lock", "what the workers take: the lock, or rw or semaphore permits")
		permits    = fs.Int("permits", 2, "with -shape semaphore: the semaphore's number of permits")
		resume     = fs.Bool("resume", false, "drop each lease half way through its cycle and resume it from a new client (Client.Resume)")
	)
	// The backend flags (-backend, -ttl, -redis-url, -postgres-url) are
	// main's: accept them here too, writing the same variables.
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil && f.Name != "timeout" {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencelab chaos: unexpected arguments %q\n", fs.Args())
		return 2
	}

	if !chaosShapes[*shape] {
		fmt.Fprintf(stderr, "fencelab chaos: unknown -shape %q (lock, rw or semaphore)\n", *shape)
		return 2
	}
	if (*sets || *transfer) && *shape != "lock" {
		fmt.Fprintln(stderr, "fencelab chaos: -sets and -transfer take sets of locks: use them with -shape lock")
		return 2
	}
	if msg := resumeConflict(*resume, *sets || *transfer, *shape); msg != "" {
		fmt.Fprintln(stderr, "fencelab chaos:", msg)
		return 2
	}
	if *killEvery < 0 || *downtime < 0 {
		fmt.Fprintln(stderr, "fencelab chaos: -kill-server-every and -kill-downtime must not be negative")
		return 2
	}
	ctx := context.Background()
	name := *backendName
	var network chaos.Network
	var proxy *faultproxy.Proxy
	var killed *killedServer
	backend, store, closeFn, err := func() (driver.Backend, fence.Store, func(), error) {
		if *killEvery > 0 {
			ks, p, o, err := openWithKills(ctx, name, *faults)
			if err != nil {
				return nil, nil, nil, err
			}
			killed, proxy = ks, p
			if p != nil {
				network = chaos.ProxyNetwork(p)
			}
			return o.backend, o.store, o.close, nil
		}
		if _, withProxy := proxied[name]; !withProxy || !*faults {
			return openBackend(ctx, name)
		}
		p, opened, err := openBehindProxy(ctx, name)
		if err != nil {
			return nil, nil, nil, err
		}
		proxy, network = p, chaos.ProxyNetwork(p)
		return opened.backend, opened.store, func() { opened.close(); _ = p.Close() }, nil
	}()
	if err != nil {
		fmt.Fprintln(stderr, "fencelab chaos:", err)
		return 2
	}
	defer closeFn()

	if *seed == 0 {
		*seed = mrand.Uint64() // chosen here so that the kills follow it too
	}
	var kills killStats
	killsDone := make(chan struct{})
	if killed != nil {
		killCtx, stopKills := context.WithTimeout(ctx, *duration)
		defer stopKills()
		go func() { defer close(killsDone); kills = killLoop(killCtx, killed.target, *killEvery, *downtime, *seed) }()
		store = afterKills{Store: store, over: killCtx.Done(), done: killsDone}
	} else {
		close(killsDone)
	}
	rep, err := runShape(ctx, chaosMode(*shape, *resume), *permits, killed != nil && killed.forgets, chaos.Config{
		Name:        name,
		Backend:     backend,
		Store:       store,
		Workers:     *workers,
		Keys:        *keys,
		Duration:    *duration,
		TTL:         *ttlFlag,
		Seed:        *seed,
		Unfenced:    *unfenced,
		Sets:        *sets,
		Transfer:    *transfer,
		LeasesLost:  killed != nil && killed.forgets,
		StallLimit:  *stallLimit,
		Polling:     *polling,
		PauseChance: pauseChance(*pause),
		Network:     network,
		FaultEvery:  *faultEvery,
	})
	<-killsDone
	if err != nil {
		fmt.Fprintln(stderr, "fencelab chaos:", err)
		return 2
	}
	if kills.err != nil {
		fmt.Fprintln(stderr, "fencelab chaos: server kill:", kills.err)
		return 2
	}
	if killed != nil {
		kills.print(stdout, killed.how, *killEvery, *downtime)
	}
	if proxy != nil {
		st := proxy.Stats()
		fmt.Fprintf(stdout, "proxy %s -> %s: %d connections, %d cut, %d replies dropped\n",
			proxy.Addr(), proxy.Target(), st.Accepted, st.Cut, st.Dropped)
	}
	rep.Print(stdout)
	if !rep.OK() {
		return 1
	}
	return 0
}

// pauseChance maps the flag to the Config field, where 0 means the default:
// -pause 0 turns pauses off.
func pauseChance(p float64) float64 {
	if p <= 0 {
		return -1
	}
	return p
}

type opened struct {
	backend driver.Backend
	store   fence.Store
	close   func()
}

// ProxiedBackend is how a chaos run puts the in-process fault proxy between
// a backend's client and its server: Target names the server's host:port,
// and Open opens the backend with its client connecting to proxyAddr
// instead (schema or table setup may still use direct connections, which
// the proxy's cuts cannot break).
type ProxiedBackend struct {
	Target func() (string, error)
	Open   func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error)
}

var proxied = map[string]ProxiedBackend{}

// RegisterProxied makes `fencelab chaos -backend name` run behind the fault
// proxy (the default, -faults). A backend registered only with
// RegisterBackend runs chaos with -faults=false.
func RegisterProxied(name string, p ProxiedBackend) { proxied[name] = p }

// hostPort is the host:port of a URL, with the default port when it has
// none.
func hostPort(name, raw, defaultPort string) (string, *url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", nil, fmt.Errorf("-faults needs the %s server as a URL with a host, not %q", name, raw)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), defaultPort), u, nil
	}
	return u.Host, u, nil
}

// withHost is raw with its host:port replaced by addr.
func withHost(raw, addr string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = addr
	return u.String()
}

// openBehindProxy starts a proxy in front of the named backend's server and
// opens the backend through it.
func openBehindProxy(ctx context.Context, name string) (*faultproxy.Proxy, opened, error) {
	pb, ok := proxied[name]
	if !ok {
		return nil, opened{}, fmt.Errorf("-faults: no proxy support for backend %q (use -faults=false)", name)
	}
	target, err := pb.Target()
	if err != nil {
		return nil, opened{}, err
	}
	p, err := faultproxy.Start(target)
	if err != nil {
		return nil, opened{}, err
	}
	var o opened
	o.backend, o.store, o.close, err = pb.Open(ctx, p.Addr())
	if err != nil {
		_ = p.Close()
		return nil, opened{}, err
	}
	return p, o, nil
}
