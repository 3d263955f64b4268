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
	"github.com/fencekit/fencekit/lock"
)

var _ lock.PermitBackend = (*Backend)(nil)

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
func kindCode(k lock.PermitKind) string {
	switch k {
	case lock.SemaphorePermit:
		return "s"
	case lock.ReadPermit:
		return "r"
	}
	return "w"
}

func kindOf(code string) lock.PermitKind {
	switch code {
	case "s":
		return lock.SemaphorePermit
	case "r":
		return lock.ReadPermit
	case "w":
		return lock.WritePermit
	}
	return 0
}

// AcquirePermit takes a permit on name for owner, extends owner's own
// (same token), or keeps owner's place in line when req.Place > 0, as
// lock.PermitBackend says; refused, the error is a *lock.HeldError with the
// time until the earliest permit expires. It is one script and one round
// trip (but for a refusal with a place while the Backend does not listen
// for wake-ups: it subscribes, then asks once more); expiries are on the
// server's clock. While owner waits in line, the
// Backend keeps a mailbox for its wake-ups (AwaitPermit) until it is
// admitted or calls LeavePermitLine. With BackendOptions.WaitReplicas, a
// granted permit counts only once that many replicas have it, as for
// Acquire; one they do not acknowledge is released again (*ReplicationError).
func (b *Backend) AcquirePermit(ctx context.Context, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	if err := lock.ValidatePermit(name, owner, req); err != nil {
		return lock.Permit{}, err
	}
	if err := b.ready(ctx); err != nil {
		return lock.Permit{}, err
	}
	keys := b.PermitKeys(name)
	box := mailbox(keys[0], owner)
	listening := false
	if req.Place > 0 {
		// Before the script runs: a release right after it finds the box.
		b.waker.open(box)
		listening = b.waker.isConfirmed()
	}
	args := []any{owner, kindCode(req.Kind), req.Limit, millis(req.TTL), millis(req.Place), b.waker.channel}
	p, err := b.acquirePermit(ctx, name, req, keys, args)
	var he *lock.HeldError
	if req.Place > 0 && !listening && errors.As(err, &he) {
		// Refused while this Backend was not yet listening: a wake-up sent
		// before it listens would be lost. Subscribe, then ask once more,
		// so that AwaitPermit misses nothing from the answer on. Only the
		// first wait of a Backend (after 30 s without waiters) costs this.
		if ok, serr := b.waker.subscribed(ctx); ok && serr == nil {
			p, err = b.acquirePermit(ctx, name, req, keys, args)
		}
	}
	if !errors.As(err, &he) {
		b.waker.close(box) // admitted or refused for good: it will not wait
	}
	return p, err
}

// acquirePermit runs permit_acquire.lua once; with WaitReplicas, in one
// pipeline with WAIT (see acquirePermitWait).
func (b *Backend) acquirePermit(ctx context.Context, name string, req lock.PermitRequest, keys []string, args []any) (lock.Permit, error) {
	if b.wait.on() {
		return b.acquirePermitWait(ctx, name, req, keys, args)
	}
	reply, err := permitAcquireScript.run(ctx, b.client, resend, keys, args...).Slice()
	if err != nil {
		b.reload.after(err)
		return lock.Permit{}, acquireError(name, err)
	}
	return parsePermit(name, req, reply)
}

// acquirePermitWait runs the script and WAIT in one pipeline, as
// acquireWait does for a lock: a permit that too few replicas acknowledged
// is released again, and the error is a *ReplicationError. A refusal is not
// waited for: it wrote at most a place in line.
func (b *Backend) acquirePermitWait(ctx context.Context, name string, req lock.PermitRequest, keys []string, args []any) (lock.Permit, error) {
	owner, _ := args[0].(string)
	res, err := b.wait.run(ctx, b.client, permitAcquireScript, resend, keys, args)
	if err != nil {
		b.reload.after(err)
		return lock.Permit{}, opError("acquire permit", name, err)
	}
	reply, err := res.script.Slice()
	if err != nil {
		b.reload.after(err)
		if isRedisError(err) {
			return lock.Permit{}, acquireError(name, err)
		}
		// A transport error: the script may have run. Take the permit back.
		return lock.Permit{}, b.unreplicatedPermit(ctx, name, owner, -1, err)
	}
	p, err := parsePermit(name, req, reply)
	if err != nil {
		return p, err
	}
	got, err := res.wait.Result()
	if err != nil {
		return lock.Permit{}, b.unreplicatedPermit(ctx, name, owner, -1, err)
	}
	if got < int64(b.wait.replicas) {
		return lock.Permit{}, b.unreplicatedPermit(ctx, name, owner, int(got), nil)
	}
	return p, nil
}

// unreplicatedPermit releases the permit that was not acknowledged and
// describes it, as unreplicated does for a lease.
func (b *Backend) unreplicatedPermit(ctx context.Context, name, owner string, got int, cause error) error {
	e := &ReplicationError{Op: "acquire", Name: name, Want: b.wait.replicas, Got: got, Timeout: b.wait.timeout, Err: cause}
	if err := b.ReleasePermit(ctx, name, owner); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		e.ReleaseErr = err
	}
	return e
}

// parsePermit reads permit_acquire.lua's reply.
func parsePermit(name string, req lock.PermitRequest, r []any) (lock.Permit, error) {
	if len(r) == 3 && r[0] == int64(1) {
		tok, ok1 := r[1].(string)
		prior, ok2 := r[2].(string)
		t, err1 := strconv.ParseInt(tok, 10, 64)
		p, err2 := strconv.ParseInt(prior, 10, 64)
		if ok1 && ok2 && err1 == nil && err2 == nil && fence.Token(t).Valid() && p >= 0 {
			return lock.Permit{Token: fence.Token(t), PriorWriter: fence.Token(p)}, nil
		}
	}
	if len(r) == 2 && r[0] == int64(0) {
		if ms, ok := r[1].(int64); ok {
			return lock.Permit{}, &lock.HeldError{Name: name, TTL: pttl(ms)}
		}
	}
	if len(r) == 3 && (r[0] == int64(2) || r[0] == int64(3)) {
		code, ok1 := r[1].(string)
		limit, ok2 := r[2].(int64)
		if ok1 && ok2 && kindOf(code) != 0 {
			have := kindOf(code)
			if r[0] == int64(3) {
				return lock.Permit{}, fmt.Errorf("%w: %q: the owner holds a %v permit; asked for a %v permit", lock.ErrShapeMismatch, name, have, req.Kind)
			}
			return lock.Permit{}, lock.ShapeMismatch(name, have, int(limit), req)
		}
	}
	return lock.Permit{}, fmt.Errorf("fencekit/redis: acquire permit %q: unexpected reply %v", name, r)
}

// ExtendPermit renews owner's live permit on name to ttl from now (server
// clock); an error matching lock.ErrNotHeld, and nothing changed, when owner
// holds none. One script, one round trip.
func (b *Backend) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	if err := b.ready(ctx); err != nil {
		return err
	}
	n, err := permitExtendScript.run(ctx, b.client, resend, b.PermitKeys(name), owner, millis(ttl)).Int64()
	if err != nil {
		b.reload.after(err)
		return opError("extend permit", name, err)
	}
	if n != 1 {
		return notHeld(name)
	}
	return nil
}

// ReleasePermit deletes owner's live permit on name and wakes the waiters
// that this lets in; an error matching lock.ErrNotHeld, and nothing changed,
// when owner holds none. The counter is kept. One script, one round trip,
// sent once (a resend after it ran would answer "not held").
func (b *Backend) ReleasePermit(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if err := b.ready(ctx); err != nil {
		return err
	}
	n, err := permitReleaseScript.run(ctx, b.client, sendOnce, b.PermitKeys(name), owner).Int64()
	if err != nil {
		b.reload.after(err)
		return opError("release permit", name, err)
	}
	if n != 1 {
		return notHeld(name)
	}
	return nil
}

// AwaitPermit waits until owner is woken for name (a release or a leave
// that lets it in, published on WakeChannel), max has passed, or ctx ends,
// as AwaitTurn does for locks: the first wait subscribes and returns once
// the subscription is confirmed, so no wake-up is lost.
func (b *Backend) AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	return b.waker.await(ctx, mailbox(b.PermitKeys(name)[0], owner), max)
}

// LeavePermitLine removes owner's place in name's line, if any, and wakes
// the waiters this lets in. One script, one round trip.
func (b *Backend) LeavePermitLine(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
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

// InspectPermits reports name's shape, live permits, live places and last
// writer, read together by one script that writes nothing.
func (b *Backend) InspectPermits(ctx context.Context, name string) (lock.Permits, error) {
	if err := fence.ValidateKey(name); err != nil {
		return lock.Permits{}, fmt.Errorf("lock name: %w", err)
	}
	if err := b.ready(ctx); err != nil {
		return lock.Permits{}, err
	}
	reply, err := permitInspectScript.run(ctx, b.client, resend, b.PermitKeys(name)).Slice()
	if err != nil {
		b.reload.after(err)
		return lock.Permits{}, opError("inspect permits", name, err)
	}
	p, ok := parsePermits(name, reply)
	if !ok {
		return lock.Permits{}, fmt.Errorf("fencekit/redis: inspect permits %q: unexpected reply %v", name, reply)
	}
	return p, nil
}

// parsePermits reads permit_inspect.lua's reply.
func parsePermits(name string, r []any) (lock.Permits, bool) {
	if len(r) < 3 || (len(r)-3)%3 != 0 {
		return lock.Permits{}, false
	}
	writer, ok1 := r[0].(string)
	waiting, ok2 := r[1].(int64)
	place, ok3 := r[2].(string)
	w, err := strconv.ParseInt(writer, 10, 64)
	if !ok1 || !ok2 || !ok3 || err != nil {
		return lock.Permits{}, false
	}
	p := lock.Permits{Name: name, Waiting: int(waiting), LastWriter: fence.Token(w)}
	setShape := func(code string, limit int) {
		if k := kindOf(code); k == lock.SemaphorePermit {
			p.Kind, p.Limit = k, limit
		} else if k != 0 {
			p.Kind = lock.WritePermit
		}
	}
	if place != "" {
		f := strings.SplitN(place, ":", 3)
		if len(f) != 3 {
			return lock.Permits{}, false
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
			return lock.Permits{}, false
		}
		limit, err1 := strconv.Atoi(f[1])
		tok, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return lock.Permits{}, false
		}
		setShape(f[0], limit)
		p.Holders = append(p.Holders, lock.PermitHolder{Owner: owner, Kind: kindOf(f[0]), Token: fence.Token(tok), TTL: pttl(ms)})
	}
	return p, true
}
