package sqldb

import (
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitName is a permit name's row of the names table.
type permitName struct {
	kind       driver.Kind // the shape: Semaphore, or Write for a read-write lock (0: never set)
	limit      int
	token      int64 // the last token issued
	lastWriter int64
	arrivals   int64 // places ever added
}

// permitOwner is an owner's row of the owners table: a permit, or a place
// in line when token is 0.
type permitOwner struct {
	owner   string
	kind    driver.Kind
	token   int64
	prior   int64
	arrival int64
	left    time.Duration // remaining, on the server's clock; <= 0: expired
}

func (o permitOwner) live() bool  { return o.left > 0 }
func (o permitOwner) place() bool { return o.token == 0 }

// permitPlan is what one acquirePermit does, decided from the rows it
// read under the name's lock: nothing (refused, or a shape mismatch), or
// one owner row to write and the name's row.
type permitPlan struct {
	err     error // refused, or ErrShapeMismatch: nothing is written
	grant   driver.Grant
	write   bool        // put row, and name's row as next
	row     permitOwner // owner's permit, or its place (token 0)
	next    permitName
	expired bool // rows of others have expired: drop them
}

// admitted reports whether the plan grants a permit.
func (p permitPlan) admitted() bool { return p.write && p.row.token != 0 }

// planPermit decides acquirePermit(req) for owner on the name's row and
// every owner row, by the rules of the driver contract: expired rows count
// for nothing (and are dropped when anything is written), a name whose
// live rows are of another shape is refused, owner's own live permit is
// extended, and otherwise owner is admitted when the permits and the
// places ahead of it leave room, or keeps (or takes) a place when req asks
// for one.
func planPermit(name, owner string, n permitName, rows []permitOwner, req driver.Request) permitPlan {
	var (
		own     *permitOwner
		live    []permitOwner
		expired bool
	)
	for i := range rows {
		switch r := &rows[i]; {
		case r.owner == owner:
			if r.live() {
				own = r
			}
		case r.live():
			live = append(live, *r)
		default:
			expired = true
		}
	}
	idle := len(live) == 0 && own == nil
	if !idle && !driver.SameShape(n.kind, n.limit, req) {
		return permitPlan{err: driver.ShapeMismatch(name, n.kind, n.limit, req)}
	}
	plan := permitPlan{expired: expired, next: n}
	if idle {
		plan.next.kind, plan.next.limit = req.Kind, req.Limit
		if req.Kind != driver.Semaphore {
			plan.next.kind = driver.Write
		}
	}
	if own != nil && !own.place() {
		if own.kind != req.Kind {
			return permitPlan{err: fmt.Errorf("%w: %q: the owner holds a %v permit, asked for a %v permit", driver.ErrShapeMismatch, name, own.kind, req.Kind)}
		}
		plan.write, plan.row = true, *own
		plan.grant = driver.Grant{Token: fence.Token(own.token), PriorWriter: fence.Token(own.prior)}
		return plan
	}
	var (
		permits, ahead int
		writer         bool // a write permit is live, or a write place is ahead
		held           time.Duration
	)
	for _, r := range live {
		switch {
		case !r.place():
			permits++
			writer = writer || r.kind == driver.Write
			if held == 0 || r.left < held {
				held = r.left
			}
		case own == nil || r.arrival < own.arrival || (r.arrival == own.arrival && r.owner < owner):
			ahead++
			writer = writer || r.kind == driver.Write
		}
	}
	var admit bool
	switch req.Kind {
	case driver.Semaphore:
		admit = permits+ahead < req.Limit
	case driver.Write:
		admit = permits == 0 && ahead == 0
	case driver.Read:
		admit = !writer
	}
	if admit {
		plan.next.token++
		plan.grant = driver.Grant{Token: fence.Token(plan.next.token), PriorWriter: fence.Token(n.lastWriter)}
		if req.Kind == driver.Write {
			plan.next.lastWriter = plan.next.token
		}
		plan.write = true
		plan.row = permitOwner{owner: owner, kind: req.Kind, token: plan.next.token, prior: n.lastWriter}
		return plan
	}
	he := &driver.HeldError{Name: name, TTL: held}
	if plan.next.kind == driver.Semaphore {
		he.Permits = plan.next.limit // the message says the semaphore is full
	}
	plan.err = he
	if req.Place == 0 {
		return permitPlan{err: plan.err}
	}
	plan.write = true
	plan.row = permitOwner{owner: owner, kind: req.Kind}
	if own != nil {
		plan.row.arrival = own.arrival // keep owner's place in line
	} else {
		plan.next.arrivals++
		plan.row.arrival = plan.next.arrivals
	}
	return plan
}
