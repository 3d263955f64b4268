package lab

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

func init() {
	subcommands["election"] = func(args []string) int { return runElectionCmd(args, os.Stdout, os.Stderr) }
}

const electionUsage = `usage: fencelab election [-backend NAME] [-ttl D] [backend flags]

Leader election with fencing. Candidate A leads and writes under its term.
Then A freezes (its renewals stop, as in a long GC pause); its lease runs
out, B campaigns, leads under a greater term and writes. A wakes up,
still believing it leads, and writes with its old term: the store refuses
it. The run prints each step and checks that the new term began after the
old one's local deadline, and that the store kept B's write. The exit code
is 0 when all of that held, 1 when something did not, 2 on a usage or
setup error.

`

// runElectionCmd is `fencelab election`.
func runElectionCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencelab election", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, electionUsage)
		fs.PrintDefaults()
	}
	// The backend flags are main's: accept them here too.
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil {
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
		fmt.Fprintf(stderr, "fencelab election: unexpected arguments %q\n", fs.Args())
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	b, s, closeFn, err := openBackend(ctx, *backendName)
	if err != nil {
		fmt.Fprintln(stderr, "fencelab election:", err)
		return 2
	}
	defer closeFn()
	fmt.Fprintf(stdout, "fencelab election on %s, lease TTL %v\n", *backendName, *ttlFlag)
	if err := electionScenario(ctx, stdout, b, s, *ttlFlag, "fencelab:"+runID()+":"); err != nil {
		fmt.Fprintln(stdout, "FAILED:", err)
		return 1
	}
	fmt.Fprintln(stdout, "the election behaved as expected: one leader at a time, and the old leader's write was refused")
	return 0
}

// freezer is a Backend whose renewals for one owner hang until their
// context ends: that holder's process is frozen, as far as its lease can
// tell.
type freezer struct {
	driver.Backend
	mu     sync.Mutex
	frozen string
}

func (f *freezer) freeze(owner string) {
	f.mu.Lock()
	f.frozen = owner
	f.mu.Unlock()
}

func (f *freezer) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	f.mu.Lock()
	frozen := c.Owner == f.frozen
	f.mu.Unlock()
	if frozen {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.Backend.Extend(ctx, c, ttl)
}

// electionScenario runs the election story and writes one line per step.
// It returns an error when an outcome is not the expected one.
func electionScenario(ctx context.Context, out io.Writer, b driver.Backend, s fence.Store, ttl time.Duration, prefix string) error {
	name, key := prefix+"leader", prefix+"leader-record"
	fb := &freezer{Backend: b}
	opts := func(md string) *lock.Options {
		return &lock.Options{Metadata: md, MaxBackoff: max(ttl/10, time.Millisecond)}
	}
	a, err := lock.New(fb, opts("candidate A")).Election(name, ttl).Campaign(ctx)
	if err != nil {
		return fmt.Errorf("A campaigns: %w", err)
	}
	defer a.Resign(context.WithoutCancel(ctx))
	aw := a.Fenced(s)
	if err := aw.Put(ctx, key, []byte("written by A")); err != nil {
		return fmt.Errorf("A writes: %w", err)
	}
	fmt.Fprintf(out, "1. A leads under term %d and writes %q\n", a.Term(), "written by A")

	watcher := lock.New(b, nil).Election(name, ttl)
	if l, err := watcher.Leader(ctx); err != nil || l.Term != a.Term() {
		return fmt.Errorf("the backend reports leader %+v, %v; want A's term %d", l, err, a.Term())
	} else {
		fmt.Fprintf(out, "2. the backend reports the leader: term %d, %q, %v to live\n", l.Term, l.Metadata, l.TTL.Round(time.Millisecond))
	}

	fb.freeze(a.Lease().Owner())
	frozeAt := time.Now()
	fmt.Fprintf(out, "3. A freezes: its renewals stop\n")

	bl, err := lock.New(fb, opts("candidate B")).Election(name, ttl).Campaign(ctx)
	if err != nil {
		return fmt.Errorf("B campaigns: %w", err)
	}
	defer bl.Resign(context.WithoutCancel(ctx))
	if bl.Term() <= a.Term() {
		return fmt.Errorf("B's term %d is not above A's %d", bl.Term(), a.Term())
	}
	if d := a.Lease().Deadline(); bl.Since().Before(d) {
		return fmt.Errorf("B's term began %v before A's local deadline: two leaders at once", d.Sub(bl.Since()))
	}
	fmt.Fprintf(out, "4. B leads under term %d, %v after A froze, after A's local deadline [ok]\n",
		bl.Term(), bl.Since().Sub(frozeAt).Round(time.Millisecond))
	bw := bl.Fenced(s)
	if err := bw.Advance(ctx, key); err != nil {
		return fmt.Errorf("B raises the fence: %w", err)
	}
	if err := bw.Put(ctx, key, []byte("written by B")); err != nil {
		return fmt.Errorf("B writes: %w", err)
	}
	fmt.Fprintf(out, "5. B writes %q\n", "written by B")

	err = aw.Put(ctx, key, []byte("written by A after its pause"))
	var stale *fence.StaleError
	if !errors.As(err, &stale) {
		return fmt.Errorf("A's write after its pause = %v; want a stale refusal", err)
	}
	fmt.Fprintf(out, "6. A wakes and writes with term %d: refused, the fence is at %d [ok]\n", stale.Token, stale.Fence)

	rec, err := s.Get(ctx, key)
	if err != nil || string(rec.Value) != "written by B" || rec.Fence != bl.Term() {
		return fmt.Errorf("the store holds %q with fence %d, %v; want B's write with fence %d", rec.Value, rec.Fence, err, bl.Term())
	}
	fmt.Fprintf(out, "7. the store holds %q with fence %d [ok]\n", rec.Value, rec.Fence)
	return nil
}
