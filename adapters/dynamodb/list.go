package dynamodb

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// List returns the locks held now whose names start with prefix ("" for
// all), sorted by name, each with its holder (owner, token, remaining TTL,
// metadata) and the live places in its line (Waiting). It reads the lock
// items under the Backend's Prefix by a strongly consistent Scan
// (begins_with on the partition key, paged), which reads the whole table
// and so costs in proportion to its size: it is meant for operators
// (fencectl), not for hot paths. The client given to NewBackend must
// satisfy ScanAPI.
//
// Expiry and remaining TTLs are judged as Inspect judges them, by what
// this Backend has watched: an entry it sees for the first time counts as
// live with its whole TTL left, even one whose holder stopped renewing it
// long ago; listing again later (fencectl watch) counts the TTLs down and
// leaves out the entries watched unchanged for their TTL.
func (b *Backend) List(ctx context.Context, prefix string) ([]lock.Info, error) {
	op := "list " + quote(prefix)
	under := b.prefix + "lock/"
	var infos []lock.Info
	err := b.scanPrefix(ctx, op, under+prefix, []string{revAttr, counterAttr, stateAttr}, func(m map[string]types.AttributeValue, at time.Time) error {
		it, err := scannedItem(op, m, at)
		if err != nil {
			return err
		}
		st, a := b.seen(it)
		if len(st.Holders) == 0 {
			return nil // free: the item keeps the name's counter
		}
		name := strings.TrimPrefix(it.key, under)
		info := st.info(name, driver.Exclusive, a)
		h := info.Holders[0]
		infos = append(infos, lock.Info{Name: name, Waiting: info.Waiting,
			Holders: []lock.Holder{{Owner: h.Owner, Token: h.Token, TTL: h.TTL, Metadata: h.Metadata}}})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(infos, func(x, y lock.Info) int { return strings.Compare(x.Name, y.Name) })
	return infos, nil
}

// PermitNames returns the permit names (semaphores and read-write locks)
// in use whose names start with prefix ("" for all), sorted: those with a
// live permit or a live place in line, as this Backend judges them (see
// List). Inspect each with a permit kind for its holders. It reads the
// permit items under the Backend's Prefix by a strongly consistent Scan,
// like List, and is meant for operators (fencectl). The client given to
// NewBackend must satisfy ScanAPI.
func (b *Backend) PermitNames(ctx context.Context, prefix string) ([]string, error) {
	op := "list permit names " + quote(prefix)
	under := b.prefix + "permit/"
	var names []string
	err := b.scanPrefix(ctx, op, under+prefix, []string{stateAttr}, func(m map[string]types.AttributeValue, at time.Time) error {
		it, err := scannedItem(op, m, at)
		if err != nil {
			return err
		}
		st, _ := b.seen(it)
		if !st.idle() {
			names = append(names, strings.TrimPrefix(it.key, under))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// Waiters returns, for each of names in order, the number of live places
// in the line of the lock of that name (0 for a lock nobody waits for, or
// one that has no item), judged as List judges entries. It costs one
// strongly consistent GetItem per name, and is meant for operators
// (fencectl watch's WAITERS column).
func (b *Backend) Waiters(ctx context.Context, names []string) ([]int64, error) {
	counts := make([]int64, len(names))
	for i, name := range names {
		_, st, _, err := b.current(ctx, "waiters "+quote(name), b.key(name, driver.Exclusive))
		if err != nil {
			return nil, err
		}
		counts[i] = int64(len(st.Line))
	}
	return counts, nil
}
