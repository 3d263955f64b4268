package sqldb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/fencekit/fencekit/lock/driver"
)

// On MySQL, Guard.Check lets one transaction at a time wait in InnoDB for a
// resource's row, through a named lock of the server's (see Guard.Check).

// oneWaiter runs f, a statement on key's row in tx, under the MySQL named
// lock for the row, waiting for it at most innodb_lock_wait_timeout
// seconds.
func (f *fencer) oneWaiter(ctx context.Context, tx *sql.Tx, key string, run func() error) error {
	name := f.lockName(key)
	var got sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT GET_LOCK(?, @@innodb_lock_wait_timeout)", name).Scan(&got); err != nil {
		return classify(ctx, f.d, f.table, fixMigrate, fmt.Sprintf("guard check %q: named lock", key), err)
	}
	if !got.Valid || got.Int64 != 1 {
		return driver.Transient(&ConflictError{Op: fmt.Sprintf("guard check %q", key), Err: errors.New("timed out waiting for the resource's named lock (GET_LOCK)")})
	}
	err := run()
	// Released even when ctx has ended: the lock is the session's, and
	// the connection goes back to the pool.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, rerr := tx.ExecContext(rctx, "DO RELEASE_LOCK(?)", name); rerr != nil && err == nil {
		// The lock stays until the connection closes: fail the
		// transaction rather than return its connection to the pool.
		err = classify(ctx, f.d, f.table, fixMigrate, fmt.Sprintf("guard check %q: release the named lock", key), rerr)
	}
	return err
}

// releaseTimeout bounds the RELEASE_LOCK that follows a Check.
const releaseTimeout = 10 * time.Second

// lockName is the MySQL named lock of key's row in the store table: a
// digest, since names are limited to 64 characters.
func (f *fencer) lockName(key string) string {
	h := sha256.New()
	h.Write([]byte(f.table))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "fencekit:" + hex.EncodeToString(h.Sum(nil))[:48]
}

// heldRows records, for each transaction still reachable, the resources
// whose row it holds locked after a successful Check: a second Check of one
// of them must not wait for the named lock, which a transaction queued on
// that very row may hold (a wait that nothing would detect). The entries
// of a transaction go when it is garbage collected; a *sql.Tx is never
// used again after its Commit or Rollback.
type heldRows struct {
	mu sync.Mutex
	m  map[weak.Pointer[sql.Tx]]map[string]struct{}
}

// holds reports whether a Check of resource in tx has succeeded.
func (h *heldRows) holds(tx *sql.Tx, resource string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[weak.Make(tx)][resource]
	return ok
}

// add records that tx holds resource's row.
func (h *heldRows) add(tx *sql.Tx, resource string) {
	wp := weak.Make(tx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[weak.Pointer[sql.Tx]]map[string]struct{}{}
	}
	set, ok := h.m[wp]
	if !ok {
		set = map[string]struct{}{}
		h.m[wp] = set
		runtime.AddCleanup(tx, h.forget, wp)
	}
	set[resource] = struct{}{}
}

// forget drops the entries of a transaction that is gone.
func (h *heldRows) forget(wp weak.Pointer[sql.Tx]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, wp)
}
