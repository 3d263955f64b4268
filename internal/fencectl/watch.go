package fencectl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// ANSI control sequences watch uses: cursor home, then erase the screen.
// Every terminal emulator since the VT100 understands them, over ssh too.
const clearScreen = "\x1b[H\x1b[2J"

// watchRow is one held lock, or one permit, as watch prints it; Waiters
// is there only on a backend that reports its queue (every one shipped:
// Redis, the SQL backends, DynamoDB, etcd, NATS), and always for a permit.
type watchRow struct {
	lockView
	Waiters *int64 `json:"waiters,omitempty"`
}

// watchView is one refresh of watch --json: one line of JSON per refresh.
type watchView struct {
	Time  time.Time  `json:"time"`
	Locks []watchRow `json:"locks"`
	Error string     `json:"error,omitempty"`
}

// watch shows the held locks whose names start with prefix, refreshed
// every c.interval: until q (or Ctrl-C) on in, a signal that ends ctx, or
// c.count refreshes when it is above zero. Each refresh is bounded by
// c.timeout; one that fails shows its error and the next one tries again.
func watch(ctx context.Context, t *target, out io.Writer, in io.Reader, c *config, prefix string) error {
	restore := rawInput(in)
	defer restore()
	quit := make(chan struct{})
	go readQuit(in, quit)
	for i := 1; ; i++ {
		v := refresh(ctx, t, c.timeout, prefix)
		if ctx.Err() != nil {
			return nil // the operator's Ctrl-C, mid-refresh
		}
		var err error
		if c.json {
			err = json.NewEncoder(out).Encode(v)
		} else {
			err = render(out, t.kind, prefix, v)
		}
		if err != nil {
			return err
		}
		if c.count > 0 && i >= c.count {
			return nil
		}
		timer := time.NewTimer(c.interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-quit:
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// refresh reads the held locks, and their waiters where the backend
// reports them.
func refresh(ctx context.Context, t *target, timeout time.Duration, prefix string) watchView {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v := watchView{Time: time.Now().UTC().Truncate(time.Millisecond), Locks: []watchRow{}}
	infos, err := t.list(ctx, prefix)
	if err != nil {
		v.Error = oneLine(err.Error())
		return v
	}
	var counts []int64
	if t.waiters != nil {
		names := make([]string, len(infos))
		for i, info := range infos {
			names[i] = info.Name
		}
		if counts, err = t.waiters(ctx, names); err != nil {
			v.Error = "waiters: " + oneLine(err.Error())
			counts = nil
		}
	}
	for i, info := range infos {
		r := watchRow{lockView: viewOf(info)}
		if counts != nil {
			r.Waiters = &counts[i]
		}
		v.Locks = append(v.Locks, r)
	}
	permits, err := permitRows(ctx, t, prefix)
	if err != nil && v.Error == "" {
		v.Error = "permits: " + oneLine(err.Error())
	}
	for _, p := range permits {
		n := p.Waiters
		v.Locks = append(v.Locks, watchRow{lockView: p, Waiters: &n})
	}
	sort.SliceStable(v.Locks, func(i, j int) bool { return viewLess(v.Locks[i].lockView, v.Locks[j].lockView) })
	return v
}

// render draws one refresh on a plain terminal: clear, home, a title line,
// the table.
func render(out io.Writer, kind, prefix string, v watchView) error {
	var b strings.Builder
	b.WriteString(clearScreen)
	scope := "all locks"
	if prefix != "" {
		scope = fmt.Sprintf("locks under %q", prefix)
	}
	fmt.Fprintf(&b, "fencectl watch: %s, %s, %s: %d held (q quits)\n\n", kind, scope, v.Time.Format("15:04:05 UTC"), len(v.Locks))
	if v.Error != "" {
		fmt.Fprintf(&b, "error: %s\n\n", v.Error)
	}
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	header := "NAME\tKIND\tTOKEN\tTTL\tMETADATA"
	withWaiters := false
	for _, r := range v.Locks {
		withWaiters = withWaiters || r.Waiters != nil
	}
	if withWaiters {
		header += "\tWAITERS"
	}
	fmt.Fprintln(w, header)
	for _, r := range v.Locks {
		line := fmt.Sprintf("%s\t%s\t%d\t%s\t%s", r.Name, kindText(r.lockView), r.Token, ttlText(r.TTLMs), r.Metadata)
		if withWaiters {
			n := int64(0)
			if r.Waiters != nil {
				n = *r.Waiters
			}
			line += fmt.Sprintf("\t%d", n)
		}
		fmt.Fprintln(w, line)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// readQuit closes quit when in yields q, Q or Ctrl-C (a byte of its own
// when the terminal is raw); at the end of in it stops reading, and watch
// goes on.
func readQuit(in io.Reader, quit chan<- struct{}) {
	if in == nil {
		return
	}
	buf := make([]byte, 64)
	for {
		n, err := in.Read(buf)
		for _, c := range buf[:n] {
			if c == 'q' || c == 'Q' || c == 0x03 {
				close(quit)
				return
			}
		}
		if err != nil {
			return // io.EOF or a closed terminal: no more keys
		}
	}
}
