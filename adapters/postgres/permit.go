package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// The permit tables write a kind as a smallint, in the numbering of their
// first version: 1 a semaphore's permit, 2 a read permit, 3 a write permit.
// A name's shape there is 1 (a semaphore) or 3 (a read-write lock), 0
// before its first permit. The statements of permit_sql.go spell these
// numbers out.
const (
	storedSemaphore int16 = 1
	storedRead      int16 = 2
	storedWrite     int16 = 3
)

// storedKind is how the permit tables write the permit kind k.
func storedKind(k driver.Kind) int16 {
	switch k {
	case driver.Semaphore:
		return storedSemaphore
	case driver.Read:
		return storedRead
	case driver.Write:
		return storedWrite
	}
	return 0
}

// kindOf is the permit kind, or a name's shape, that the permit tables
// write as stored; 0 for none.
func kindOf(stored int16) driver.Kind {
	switch stored {
	case storedSemaphore:
		return driver.Semaphore
	case storedRead:
		return driver.Read
	case storedWrite:
		return driver.Write
	}
	return 0
}

// permitBox names owner's wake-ups for the permit name, as the statements
// write them: a mailbox apart from the single-name locks' (see mailbox),
// since a permit name and a lock name may be equal.
func permitBox(name, owner string) string {
	return "p" + mailbox(name, owner)
}

// acquirePermit (Acquire with a permit kind) takes a permit on req.Name
// for req.Owner (a semaphore's, or a read-write lock's read or write
// permit), extends the one the owner holds, or keeps the owner's place in
// line when req.Place > 0, as the driver contract says. The permits live in
// the lease table's permit tables (see Migrate), apart from the single-name
// locks, and expire on the database clock. They keep no metadata.
//
// It is one round trip: a batch of two statements that the server runs as
// one transaction, the first locking name's state row (creating it on the
// first acquire), the second deciding on a snapshot taken after that lock,
// so that the acquires of one name are serialized at READ COMMITTED. The
// state row keeps name's token counter and last writer forever.
//
// Before Migrate has created the permit tables, it returns an error
// matching ErrNotMigrated.
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	name, owner := req.Name, req.Owner
	if err := b.permitReady(ctx); err != nil {
		return driver.Grant{}, err
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
		[]any{name, owner, storedKind(req.Kind), int32(req.Limit), interval(req.TTL), interval(req.Place), channel},
		func(br pgx.BatchResults) error {
			return br.QueryRow().Scan(&verdict, &token, &prior, &heldMicros, &kind, &limit)
		})
	if err != nil {
		if req.Place == 0 {
			b.waker.close(box)
		}
		return driver.Grant{}, err
	}
	if verdict != "place" {
		b.waker.close(box) // not in line: nothing to wake
	}
	switch verdict {
	case "admit", "mine":
		if token == nil || prior == nil {
			return driver.Grant{}, fmt.Errorf("postgres: %s: no token in the reply (verdict %s)", op, verdict)
		}
		return driver.Grant{Token: fence.Token(*token), PriorWriter: fence.Token(*prior)}, nil
	case "shape":
		return driver.Grant{}, driver.ShapeMismatch(name, kindOf(kind), int(limit), req)
	case "kind":
		return driver.Grant{}, fmt.Errorf("%w: owner holds a permit of another kind on %q than the %v permit asked for",
			driver.ErrShapeMismatch, name, req.Kind)
	case "place", "held":
		held := &driver.HeldError{Name: name, Kind: req.Kind}
		if heldMicros != nil && *heldMicros > 0 {
			held.TTL = time.Duration(*heldMicros) * time.Microsecond
		}
		if req.Kind == driver.Semaphore {
			held.Permits = req.Limit // the shape is the request's, or the verdict were "shape"
		}
		return driver.Grant{}, held
	}
	return driver.Grant{}, fmt.Errorf("postgres: %s: unknown verdict %q", op, verdict)
}

// extendPermit renews owner's live permit on name to ttl from now, on the
// database clock. It never re-creates a permit that expired or was
// released: then it returns an error matching driver.ErrNotHeld. One round
// trip: the batch locks name's state row shared (so a renewal and an
// acquire that might count the permit as expired are serialized) and
// updates the permit.
func (b *Backend) extendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
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
		return fmt.Errorf("postgres: %s: %w", op, driver.ErrNotHeld)
	}
	return nil
}

// releasePermit deletes owner's live permit on name, keeping name's token
// counter, and notifies the waiters in line that the permits left let in.
// When owner holds none it returns an error matching driver.ErrNotHeld. One
// round trip (the batch locks name's state row, so that two releases at
// once both see each other's permits gone and wake whom they let in).
func (b *Backend) releasePermit(ctx context.Context, name, owner string) error {
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
		return fmt.Errorf("postgres: %s: %w", op, driver.ErrNotHeld)
	}
	return nil
}

// awaitPermit waits until owner is woken for name (a releasePermit or
// leavePermitLine that lets it in, notified on WakeChannel), max has
// passed, or ctx ends (then its error matches ctx.Err()). The first wait
// through this Backend opens the listening connection; once LISTEN has
// taken effect, one statement asks whether owner's place is let in already
// (a wake-up sent before LISTEN is lost): then it returns at once, so that
// the caller asks again, and otherwise it waits, since any later change
// notifies it.
func (b *Backend) awaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
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

// leavePermitLine deletes owner's place in name's line, notifying the
// waiters that its going lets in; nil when owner has none. One round trip.
func (b *Backend) leavePermitLine(ctx context.Context, name, owner string) error {
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	b.waker.close(permitBox(name, owner))
	op := fmt.Sprintf("leave the permit line of %q", name)
	var notified int64
	return b.permitBatch(ctx, op, b.permits.lockOwn, b.permits.leave, []any{name, owner},
		func(br pgx.BatchResults) error { return br.QueryRow().Scan(&notified) })
}

// inspectPermits reports name's shape (Semaphore, or Write for a
// read-write lock; 0 when nothing is live), live permits (remaining TTLs on
// the database clock), live places and last writer, from one statement's
// snapshot.
func (b *Backend) inspectPermits(ctx context.Context, name string) (driver.Info, error) {
	if err := b.permitReady(ctx); err != nil {
		return driver.Info{}, err
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
		return driver.Info{}, wrapTableErr(b.permitTable, fixMigrate, fmt.Sprintf("inspect the permits on %q", name), err)
	}
	info := driver.Info{Name: name, Waiting: int(waiting), LastWriter: fence.Token(lastWriter)}
	for i := range owners {
		info.Holders = append(info.Holders, driver.Holder{
			Owner: owners[i],
			Kind:  kindOf(kinds[i]),
			Token: fence.Token(tokens[i]),
			TTL:   time.Duration(remainMicros[i]) * time.Microsecond,
		})
	}
	if len(info.Holders) > 0 || info.Waiting > 0 {
		// The shape counts only while something is live.
		info.Kind, info.Limit = kindOf(kind), int(limit)
	}
	return info, nil
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
