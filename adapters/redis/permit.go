package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// The permit scripts: each is permit_lib.lua (the key layout, the purge of
// expired entries, the wake-ups) followed by its operation.
var (
	//go:embed scripts/permit_lib.lua
	permitLibLua string
	//go:embed scripts/permit_acquire.lua
	permitAcquireLua string
	//go:embed scripts/permit_extend.lua
	permitExtendLua string
	//go:embed scripts/permit_release.lua
	permitReleaseLua string
	//go:embed scripts/permit_leave.lua
	permitLeaveLua string
	//go:embed scripts/permit_inspect.lua
	permitInspectLua string

	permitAcquireScript = newScript(permitLibLua + "\n" + permitAcquireLua)
	permitExtendScript  = newScript(permitLibLua + "\n" + permitExtendLua)
	permitReleaseScript = newScript(permitLibLua + "\n" + permitReleaseLua)
	permitLeaveScript   = newScript(permitLibLua + "\n" + permitLeaveLua)
	permitInspectScript = newScript(permitLibLua + "\n" + permitInspectLua)
)

// permitParts are the suffixes of a permit name's keys, in the order the
// scripts take them (scripts/permit_lib.lua).
var permitParts = [...]string{"counter", "held", "expiry", "waiting", "places", "line", "writers"}

// PermitKeys returns the keys of the permit name name (a semaphore or a
// read-write lock), "<prefix>:{name}:permit:<part>", in the order the
// permit scripts take them: counter (a hash of the last token minted and
// the last writer's token, kept forever), held, expiry, waiting, places,
// line and writers (each gone once its last permit or place is). They share
// the hash tag of LeaseKey but none of its keys: a semaphore and a lock of
// the same name never meet.
func (b *Backend) PermitKeys(name string) []string {
	base := b.prefix + ":{" + escapeKey(name) + "}:permit:"
	keys := make([]string, len(permitParts))
	for i, p := range permitParts {
		keys[i] = base + p
	}
	return keys
}

// kindCode is how the scripts write a kind.
func kindCode(k driver.Kind) string {
	switch k {
	case driver.Semaphore:
		return "s"
	case driver.Read:
		return "r"
	}
	return "w"
}

func kindOf(code string) driver.Kind {
	switch code {
	case "s":
		return driver.Semaphore
	case "r":
		return driver.Read
	case "w":
		return driver.Write
	}
	return 0
}

// acquirePermit takes a permit of kind req.Kind on req.Name for req.Owner,
// extends the owner's own (same token), or keeps the owner's place in line
// when req.Place > 0, as the driver contract says; refused, the error is a
// *driver.HeldError with the time until the earliest permit expires. It is
// one script and one round trip (but for a refusal with a place while the
// Backend does not listen for wake-ups: it subscribes, then asks once
// more); expiries are on the server's clock. While the owner waits in line,
// the Backend keeps a mailbox for its wake-ups (Await) until it is admitted
// or leaves the line. With BackendOptions.WaitReplicas, a granted permit
// counts only once that many replicas have it, as for a lock; one they do
// not acknowledge is released again (*ReplicationError).
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Grant{}, err
	}
	keys := b.PermitKeys(req.Name)
	box := mailbox(keys[0], req.Owner)
	listening := false
	if req.Place > 0 {
		// Before the script runs: a release right after it finds the box.
		b.waker.open(box)
		listening = b.waker.isConfirmed()
	}
	args := []any{req.Owner, kindCode(req.Kind), req.Limit, millis(req.TTL), millis(req.Place), b.waker.channel}
	g, err := b.sendPermitAcquire(ctx, req, keys, args)
	var he *driver.HeldError
	if req.Place > 0 && !listening && errors.As(err, &he) {
		// Refused while this Backend was not yet listening: a wake-up sent
		// before it listens would be lost. Subscribe, then ask once more,
		// so that Await misses nothing from the answer on. Only the first
		// wait of a Backend (after 30 s without waiters) costs this.
		if ok, serr := b.waker.subscribed(ctx); ok && serr == nil {
			g, err = b.sendPermitAcquire(ctx, req, keys, args)
		}
	}
	if !errors.As(err, &he) {
		b.waker.close(box) // admitted or refused for good: it will not wait
	}
	return g, err
}

// sendPermitAcquire runs permit_acquire.lua once; with WaitReplicas, in one
// pipeline with WAIT (see acquirePermitWait).
func (b *Backend) sendPermitAcquire(ctx context.Context, req driver.Request, keys []string, args []any) (driver.Grant, error) {
	if b.wait.on() {
		return b.acquirePermitWait(ctx, req, keys, args)
	}
	reply, err := permitAcquireScript.run(ctx, b.client, resend, keys, args...).Slice()
	if err != nil {
		b.reload.after(err)
		return driver.Grant{}, acquireError(req.Name, err)
	}
	return parsePermit(req, reply)
}

// acquirePermitWait runs the script and WAIT in one pipeline, as
// acquireWait does for a lock: a permit that too few replicas acknowledged
// is released again, and the error is a *ReplicationError. A refusal is not
// waited for: it wrote at most a place in line.
func (b *Backend) acquirePermitWait(ctx context.Context, req driver.Request, keys []string, args []any) (driver.Grant, error) {
	name, owner := req.Name, req.Owner
	res, err := b.wait.run(ctx, b.client, permitAcquireScript, resend, keys, args)
	if err != nil {
		b.reload.after(err)
		return driver.Grant{}, opError("acquire permit", name, err)
	}
	reply, err := res.script.Slice()
	if err != nil {
		b.reload.after(err)
		if isRedisError(err) {
			return driver.Grant{}, acquireError(name, err)
		}
		// A transport error: the script may have run. Take the permit back.
		return driver.Grant{}, b.unreplicatedPermit(ctx, name, owner, -1, err)
	}
	g, err := parsePermit(req, reply)
	if err != nil {
		return g, err
	}
	got, err := res.wait.Result()
	if err != nil {
		return driver.Grant{}, b.unreplicatedPermit(ctx, name, owner, -1, err)
	}
	if got < int64(b.wait.replicas) {
		return driver.Grant{}, b.unreplicatedPermit(ctx, name, owner, int(got), nil)
	}
	return g, nil
}

// unreplicatedPermit releases the permit that was not acknowledged and
// describes it, as unreplicated does for a lease.
func (b *Backend) unreplicatedPermit(ctx context.Context, name, owner string, got int, cause error) error {
	e := &ReplicationError{Op: "acquire", Name: name, Want: b.wait.replicas, Got: got, Timeout: b.wait.timeout, Err: cause}
	if err := b.releasePermit(ctx, name, owner); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		e.ReleaseErr = err
	}
	return e
}

// parsePermit reads permit_acquire.lua's reply to req.
func parsePermit(req driver.Request, r []any) (driver.Grant, error) {
	name := req.Name
	if len(r) == 3 && r[0] == int64(1) {
		tok, ok1 := r[1].(string)
		prior, ok2 := r[2].(string)
		t, err1 := strconv.ParseInt(tok, 10, 64)
		p, err2 := strconv.ParseInt(prior, 10, 64)
		if ok1 && ok2 && err1 == nil && err2 == nil && fence.Token(t).Valid() && p >= 0 {
			return driver.Grant{Token: fence.Token(t), PriorWriter: fence.Token(p)}, nil
		}
	}
	if len(r) == 2 && r[0] == int64(0) {
		if ms, ok := r[1].(int64); ok {
			// The name has req's shape (or the script would have said
			// otherwise): a semaphore refusal is of req.Limit permits.
			return driver.Grant{}, &driver.HeldError{Name: name, TTL: pttl(ms), Kind: req.Kind, Permits: req.Limit}
		}
	}
	if len(r) == 3 && (r[0] == int64(2) || r[0] == int64(3)) {
		code, ok1 := r[1].(string)
		limit, ok2 := r[2].(int64)
		if ok1 && ok2 && kindOf(code) != 0 {
			have := kindOf(code)
			if r[0] == int64(3) {
				return driver.Grant{}, fmt.Errorf("%w: %q: the owner holds a %v permit; asked for a %v permit", driver.ErrShapeMismatch, name, have, req.Kind)
			}
			return driver.Grant{}, driver.ShapeMismatch(name, have, int(limit), req)
		}
	}
	return driver.Grant{}, fmt.Errorf("fencekit/redis: acquire permit %q: unexpected reply %v", name, r)
}

// extendPermit renews owner's live permit on name to ttl from now (server
// clock); an error matching driver.ErrNotHeld, and nothing changed, when
// owner holds none. One script, one round trip.
func (b *Backend) extendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	n, err := permitExtendScript.run(ctx, b.client, resend, b.PermitKeys(name), owner, millis(ttl)).Int64()
	if err != nil {
		b.reload.after(err)
		return opError("extend permit", name, err)
	}
	if n != 1 {
		return driver.NotHeld(name)
	}
	return nil
}

// releasePermit deletes owner's live permit on name and wakes the waiters
// that this lets in; an error matching driver.ErrNotHeld, and nothing
// changed, when owner holds none. The counter is kept. One script, one
// round trip, sent once (a resend after it ran would answer "not held").
func (b *Backend) releasePermit(ctx context.Context, name, owner string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	n, err := permitReleaseScript.run(ctx, b.client, sendOnce, b.PermitKeys(name), owner).Int64()
	if err != nil {
		b.reload.after(err)
		return opError("release permit", name, err)
	}
	if n != 1 {
		return driver.NotHeld(name)
	}
	return nil
}

// leavePermitLine removes owner's place in name's line, if any, and wakes
// the waiters this lets in. One script, one round trip.
func (b *Backend) leavePermitLine(ctx context.Context, name, owner string) error {
	keys := b.PermitKeys(name)
	b.waker.close(mailbox(keys[0], owner))
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := permitLeaveScript.run(ctx, b.client, resend, keys, owner).Err(); err != nil {
		b.reload.after(err)
		return opError("leave permit line", name, err)
	}
	return nil
}

// inspectPermits reports name's shape, live permits, live places and last
// writer, read together by one script that writes nothing.
func (b *Backend) inspectPermits(ctx context.Context, name string) (driver.Info, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Info{}, err
	}
	reply, err := permitInspectScript.run(ctx, b.client, resend, b.PermitKeys(name)).Slice()
	if err != nil {
		b.reload.after(err)
		return driver.Info{}, opError("inspect permits", name, err)
	}
	p, ok := parsePermits(name, reply)
	if !ok {
		return driver.Info{}, fmt.Errorf("fencekit/redis: inspect permits %q: unexpected reply %v", name, reply)
	}
	return p, nil
}

// parsePermits reads permit_inspect.lua's reply.
func parsePermits(name string, r []any) (driver.Info, bool) {
	if len(r) < 3 || (len(r)-3)%3 != 0 {
		return driver.Info{}, false
	}
	writer, ok1 := r[0].(string)
	waiting, ok2 := r[1].(int64)
	place, ok3 := r[2].(string)
	w, err := strconv.ParseInt(writer, 10, 64)
	if !ok1 || !ok2 || !ok3 || err != nil {
		return driver.Info{}, false
	}
	p := driver.Info{Name: name, Waiting: int(waiting), LastWriter: fence.Token(w)}
	setShape := func(code string, limit int) {
		if k := kindOf(code); k == driver.Semaphore {
			p.Kind, p.Limit = k, limit
		} else if k != 0 {
			p.Kind = driver.Write
		}
	}
	if place != "" {
		f := strings.SplitN(place, ":", 3)
		if len(f) != 3 {
			return driver.Info{}, false
		}
		limit, _ := strconv.Atoi(f[1])
		setShape(f[0], limit)
	}
	for i := 3; i < len(r); i += 3 {
		owner, ok1 := r[i].(string)
		v, ok2 := r[i+1].(string)
		ms, ok3 := r[i+2].(int64)
		f := strings.Split(v, ":")
		if !ok1 || !ok2 || !ok3 || len(f) != 4 {
			return driver.Info{}, false
		}
		limit, err1 := strconv.Atoi(f[1])
		tok, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return driver.Info{}, false
		}
		setShape(f[0], limit)
		p.Holders = append(p.Holders, driver.Holder{Owner: owner, Kind: kindOf(f[0]), Token: fence.Token(tok), TTL: pttl(ms)})
	}
	return p, true
}
