package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// acquireSet (Acquire with Names) takes every lock in names for owner for
// ttl in one transaction, or none of them: each lock is taken (or extended,
// with its token, when owner holds it) by the statement acquireLock runs,
// with md as its metadata, all sent in one pipelined batch, and when another
// owner holds any of them the transaction is rolled back and the error is a
// *driver.HeldError for the first such name (in sorted order) with its
// remaining TTL. The tokens come in the order of names.
//
// The statements lock the rows in sorted order of the names, whatever order
// they come in, so that two sets that overlap cannot deadlock each other;
// the rows stay locked until the transaction ends, so a concurrent acquire
// of one of these names waits that long, and nobody sees a part of the set
// taken.
func (b *Backend) acquireSet(ctx context.Context, names []string, owner string, ttl time.Duration, md string) (tokens []fence.Token, err error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("acquire %q", names)
	conn, err := b.db.Acquire(ctx)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	defer func() {
		if err != nil {
			// Best effort: a failed rollback leaves the connection to the
			// pool, which discards it, and the server aborts the
			// transaction when the connection closes.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	// order lists the positions in names of the names in sorted order.
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(names[i], names[j]) })
	batch := &pgx.Batch{}
	for _, i := range order {
		batch.Queue(b.acquire, names[i], owner, interval(ttl), md)
	}
	results := tx.SendBatch(ctx, batch)
	tokens = make([]fence.Token, len(names))
	var held *driver.HeldError
	for _, i := range order {
		name := names[i]
		var token, heldMicros *int64
		serr := results.QueryRow().Scan(&token, &heldMicros)
		switch {
		case serr == nil && token != nil:
			tokens[i] = fence.Token(*token)
		case serr == nil || serr == pgx.ErrNoRows:
			// Held by another owner (the remaining TTL when known), or the
			// row changed under the statement: either way not ours now.
			if held == nil {
				held = &driver.HeldError{Name: name}
				if heldMicros != nil && *heldMicros > 0 {
					held.TTL = time.Duration(*heldMicros) * time.Microsecond
				}
			}
		default:
			_ = results.Close()
			return nil, wrapTableErr(b.table, fixMigrate, op, serr)
		}
	}
	if err := results.Close(); err != nil {
		return nil, wrapTableErr(b.table, fixMigrate, op, err)
	}
	if held != nil {
		return nil, held
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, wrapErr(op, err)
	}
	return tokens, nil
}
