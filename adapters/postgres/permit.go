package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.PermitBackend = (*Backend)(nil)

// permitBox names owner's wake-ups for the permit name, as the statements
// write them: a mailbox apart from the single-name locks' (see mailbox),
// since a permit name and a lock name may be equal.
func permitBox(name, owner string) string {
	return "p" + mailbox(name, owner)
}

// AcquirePermit takes a permit on name for owner (a semaphore's, or a
// read-write lock's read or write permit), extends the one owner holds, or
// keeps owner's place in line when req.Place > 0, as lock.PermitBackend
// says. The permits live in the lease table's permit tables (see Migrate),
// apart from the single-name locks, and expire on the database clock.
//
// It is one round trip: a batch of two statements that the server runs as
// one transaction, the first locking name's state row (creating it on the
// first acquire), the second deciding on a snapshot taken after that lock,
// so that the acquires of one name are serialized at READ COMMITTED. The
// state row keeps name's token counter and last writer forever.
//
// Before Migrate has created the permit tables, it returns an error
// matching ErrNotMigrated.
func (b *Backend) AcquirePermit(ctx context.Context, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	if err := lock.ValidatePermit(name, owner, req); err != nil {
		return lock.Permit{}, err
	}
	if err := b.permitReady(ctx); err != nil {
		return lock.Permit{}, err
	}
	// The mailbox exists before the statements run: a release right after
	// them finds it.
	box := permitBox(name, owner)
	if req.Place > 0 {
		b.waker.open(box)
	}
	var channel *string
	if b.waker.channel != "" {
		channel = &b.waker.channel
	}
	var (
		verdict                  string
		token, prior, heldMicros *int64
		kind                     int16
		limit                    int32
	)
	op := fmt.Sprintf("acquire a permit on %q", name)
	err := b.permitBatch(ctx, op, b.permits.lockNew, b.permits.acquire,
		[]any{name, owner, int16(req.Kind), int32(req.Limit), interval(req.TTL), interval(req.Place), channel},
		func(br pgx.BatchResults) error {
			return br.QueryRow().Scan(&verdict, &token, &prior, &heldMicros, &kind, &limit)
		})
	if err != nil {
		if req.Place == 0 {
			b.waker.close(box)
		}
		return lock.Permit{}, err
	}
	if verdict != "place" {
		b.waker.close(box) // not in line: nothing to wake
	}
	switch verdict {
	case "admit", "mine":
		if token == nil || prior == nil {
			return lock.Permit{}, fmt.Errorf("postgres: %s: no token in the reply (verdict %s)", op, verdict)
		}
		return lock.Permit{Token: fence.Token(*token), PriorWriter: fence.Token(*prior)}, nil
	case "shape":
		return lock.Permit{}, lock.ShapeMismatch(name, lock.PermitKind(kind), int(limit), req)
	case "kind":
		return lock.Permit{}, fmt.Errorf("%w: owner holds a permit of another kind on %q than the %v permit asked for",
			lock.ErrShapeMismatch, name, req.Kind)
	case "place", "held":
		held := &lock.HeldError{Name: name}
		if heldMicros != nil && *heldMicros > 0 {
			held.TTL = time.Duration(*heldMicros) * time.Microsecond
		}
		return lock.Permit{}, held
	}
	return lock.Permit{}, fmt.Errorf("postgres: %s: unknown verdict %q", op, verdict)
}

// ExtendPermit renews owner's live permit on name to ttl from now, on the
// database clock. It never re-creates a permit that expired or was
// released: then it returns an error matching lock.ErrNotHeld. One round
// trip: the batch locks name's state row shared (so a renewal and an
// acquire that might count the permit as expired are serialized) and
// updates the permit.
func (b *Backend) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	op := fmt.Sprintf("extend a permit on %q", name)
	var renewed int64
	err := b.permitBatch(ctx, op, b.permits.lockShared, b.permits.extend, []any{name, owner, interval(ttl)},
		func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			renewed = tag.RowsAffected()
			return err
		})
	if err != nil {
		return err
	}
	if renewed == 0 {
		return fmt.Errorf("postgres: %s: %w", op, lock.ErrNotHeld)
	}
	return nil
}

// ReleasePermit deletes owner's live permit on name, keeping name's token
// counter, and notifies the waiters in line that the permits left let in.
// When owner holds none it returns an error matching lock.ErrNotHeld. One
// round trip (the batch locks name's state row, so that two releases at
// once both see each other's permits gone and wake whom they let in).
func (b *Backend) ReleasePermit(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	op := fmt.Sprintf("release a permit on %q", name)
	var released, notified int64
	err := b.permitBatch(ctx, op, b.permits.lockOwn, b.permits.release, []any{name, owner},
		func(br pgx.BatchResults) error { return br.QueryRow().Scan(&released, &notified) })
	if err != nil {
		return err
	}
	if released == 0 {
		return fmt.Errorf("postgres: %s: %w", op, lock.ErrNotHeld)
	}
	return nil
}

// AwaitPermit waits until owner is woken for name (a ReleasePermit or
// LeavePermitLine that lets it in, notified on WakeChannel), max has
// passed, or ctx ends (then its error matches ctx.Err()). The first wait
// through this Backend opens the listening connection; once LISTEN has
// taken effect, one statement asks whether owner's place is let in already
// (a wake-up sent before LISTEN is lost): then it returns at once, so that
// the caller asks again, and otherwise it waits, since any later change
// notifies it.
func (b *Backend) AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	if b.permitErr != nil {
		return b.permitErr
	}
	return b.waker.await(ctx, permitBox(name, owner), max, func(ctx context.Context) (bool, error) {
		var missed bool
		err := b.db.QueryRow(ctx, b.permits.missed, name, owner).Scan(&missed)
		return missed, err
	})
}

// LeavePermitLine deletes owner's place in name's line, notifying the
// waiters that its going lets in; nil when owner has none. One round trip.
func (b *Backend) LeavePermitLine(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	b.waker.close(permitBox(name, owner))
	op := fmt.Sprintf("leave the permit line of %q", name)
	var notified int64
	return b.permitBatch(ctx, op, b.permits.lockOwn, b.permits.leave, []any{name, owner},
		func(br pgx.BatchResults) error { return br.QueryRow().Scan(&notified) })
}

// InspectPermits reports name's shape, live permits (remaining TTLs on the
// database clock), live places and last writer, from one statement's
// snapshot.
func (b *Backend) InspectPermits(ctx context.Context, name string) (lock.Permits, error) {
	if name == "" {
		return lock.Permits{}, fence.Invalid("empty lock name")
	}
	if err := fence.ValidateKey(name); err != nil {
		return lock.Permits{}, fmt.Errorf("lock name: %w", err)
	}
	if err := b.permitReady(ctx); err != nil {
		return lock.Permits{}, err
	}
	var (
		kind                 int16
		limit                int32
		lastWriter, waiting  int64
		owners               []string
		kinds                []int16
		tokens, remainMicros []int64
	)
	err := b.db.QueryRow(ctx, b.permits.inspect, name).
		Scan(&kind, &limit, &lastWriter, &waiting, &owners, &kinds, &tokens, &remainMicros)
	if err != nil {
		return lock.Permits{}, wrapTableErr(b.permitTable, fixMigrate, fmt.Sprintf("inspect the permits on %q", name), err)
	}
	p := lock.Permits{Name: name, Waiting: int(waiting), LastWriter: fence.Token(lastWriter)}
	for i := range owners {
		p.Holders = append(p.Holders, lock.PermitHolder{
			Owner: owners[i],
			Kind:  lock.PermitKind(kinds[i]),
			Token: fence.Token(tokens[i]),
			TTL:   time.Duration(remainMicros[i]) * time.Microsecond,
		})
	}
	if len(p.Holders) > 0 || p.Waiting > 0 {
		// The shape counts only while something is live.
		p.Kind, p.Limit = lock.PermitKind(kind), int(limit)
	}
	return p, nil
}

// permitReady is what every permit call checks before it sends anything.
func (b *Backend) permitReady(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	if b.permitErr != nil {
		return b.permitErr
	}
	return ctx.Err()
}

// permitBatch sends lockSQL (with args[0], the name) and work (with args)
// as one batch on one pooled connection, and reads work's result with
// read. Without an explicit transaction the server runs a batch (one
// Sync) as one implicit transaction: the row lock that lockSQL takes holds
// until work has committed, and a failure of either rolls both back.
func (b *Backend) permitBatch(ctx context.Context, op, lockSQL, work string, args []any, read func(pgx.BatchResults) error) error {
	conn, err := b.db.Acquire(ctx)
	if err != nil {
		return wrapErr(op, err)
	}
	defer conn.Release()
	batch := &pgx.Batch{}
	batch.Queue(lockSQL, args[0])
	batch.Queue(work, args...)
	br := conn.SendBatch(ctx, batch)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return wrapTableErr(b.permitTable, fixMigrate, op, err)
	}
	if err := read(br); err != nil {
		_ = br.Close()
		return wrapTableErr(b.permitTable, fixMigrate, op, err)
	}
	if err := br.Close(); err != nil {
		return wrapTableErr(b.permitTable, fixMigrate, op, err)
	}
	return nil
}
