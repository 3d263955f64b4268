package sqldb

import (
	"sync"
	"time"

	"github.com/fencekit/fencekit/internal/wake"
)

// localLines are the waiters in line through one Backend, name by name, so
// that only one of them re-checks the server per name and process: the
// local leader, the one furthest ahead in the server's line as far as this
// Backend knows (on MySQL the token seen plus the places ahead then; on
// PostgreSQL, whose one statement does not read the token, the order in
// which they queued here). The others
// wait in memory, and are woken when the leader takes the lock or leaves
// the line (the next one leads), or when the leader finds the line stalled.
// A Release through this Backend wakes the leader at once. So the
// statements per acquisition do not grow with the waiters of one process;
// they grow with the processes that have waiters, one re-checking waiter
// each.
type localLines struct {
	mu    sync.Mutex
	names map[string][]*pace // name → its local waiters, in the order they queued
}

// join puts p at the tail of its name's local line, once.
func (l *localLines) join(p *pace) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.joined {
		return
	}
	if l.names == nil {
		l.names = map[string][]*pace{}
	}
	p.joined = true
	l.names[p.name] = append(l.names[p.name], p)
}

// leave takes p out of its name's local line; when p led it, the next
// waiter leads now, and is woken to re-check.
func (l *localLines) leave(p *pace) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.names[p.name]
	for i, q := range line {
		if q != p {
			continue
		}
		led := leader(line) == p
		line = append(line[:i:i], line[i+1:]...)
		if len(line) == 0 {
			delete(l.names, p.name)
		} else {
			l.names[p.name] = line
		}
		if led && len(line) > 0 {
			wake.Post(leader(line).box)
		}
		return
	}
}

// leads reports whether p leads its name's local line (and re-checks the
// server for it); when it does not, also how long until the leader counts
// as gone unless it shows up (see pace.gone).
func (l *localLines) leads(p *pace) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.names[p.name]
	if len(line) == 0 {
		return true, 0
	}
	q := leader(line)
	if q == p {
		return true, 0
	}
	return false, q.goneIn(time.Now())
}

// leader is the waiter of line furthest ahead: the smallest known order,
// else the first to queue here. A waiter gone without a word (see
// pace.gone: a goroutine that queued and never came back) does not lead:
// its place has expired on the server too.
func leader(line []*pace) *pace {
	now := time.Now()
	var (
		best      *pace
		bestOrder int64
	)
	for _, q := range line {
		if q.gone(now) {
			continue
		}
		o := q.order()
		if best == nil || (o > 0 && (bestOrder == 0 || o < bestOrder)) {
			best, bestOrder = q, o
		}
	}
	if best == nil {
		return line[0]
	}
	return best
}

// wakeLeader wakes the leader of name's local line, if any: the lock was
// released through this Backend.
func (l *localLines) wakeLeader(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if line := l.names[name]; len(line) > 0 {
		wake.Post(leader(line).box)
	}
}

// stalled wakes every local waiter of p's name but p, each to ask again at
// once (acquireInLine): the leader p saw the lock free, and others
// ahead of it, twice with the same token. The local order (who queued first
// here) may differ from the server's when two waiters queued at the same
// moment, and a waiter that is first on the server but not the local
// leader would otherwise wait for its place's renewal.
func (l *localLines) stalled(p *pace) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range l.names[p.name] {
		if q != p {
			q.mu.Lock()
			q.reask = true
			q.mu.Unlock()
			wake.Post(q.box)
		}
	}
}
