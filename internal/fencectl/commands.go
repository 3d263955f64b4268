package fencectl

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// lockView is a lock, or one permit of a semaphore or read-write lock, as
// fencectl prints it.
type lockView struct {
	Name string `json:"name"`
	Held bool   `json:"held"`
	// Kind is "lock", or the permit's kind: "semaphore", "read", "write".
	Kind string `json:"kind,omitempty"`
	// Limit is a semaphore's number of permits.
	Limit    int    `json:"limit,omitempty"`
	Owner    string `json:"owner,omitempty"`
	Metadata string `json:"metadata,omitempty"`
	Token    int64  `json:"token,omitempty"`
	TTLMs    int64  `json:"ttl_ms,omitempty"`
	// Waiters counts the places in the name's line, where known.
	Waiters int64 `json:"waiters,omitempty"`
}

// lockKind is lockView.Kind for a lock.
const lockKind = "lock"

// viewOf is the view of a lock that a backend's List reported.
func viewOf(info lock.Info) lockView {
	v := lockView{Name: info.Name, Held: info.Held(), Kind: lockKind, Waiters: int64(info.Waiting)}
	if v.Held {
		h := info.Holders[0]
		v.Owner, v.Metadata, v.Token, v.TTLMs = h.Owner, h.Metadata, int64(h.Token), h.TTL.Milliseconds()
	}
	return v
}

// permitViews are the views of a permit name's holders, by token.
func permitViews(info driver.Info) []lockView {
	hs := sortedHolders(info.Holders)
	views := make([]lockView, len(hs))
	for i, h := range hs {
		views[i] = lockView{Name: info.Name, Held: true, Kind: h.Kind.String(), Owner: h.Owner, Metadata: h.Metadata,
			Token: int64(h.Token), TTLMs: h.TTL.Milliseconds(), Waiters: int64(info.Waiting)}
		if h.Kind == driver.Semaphore {
			views[i].Limit = info.Limit
		}
	}
	return views
}

// sortedHolders is a copy of hs by token.
func sortedHolders(hs []driver.Holder) []driver.Holder {
	hs = append([]driver.Holder(nil), hs...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].Token < hs[j].Token })
	return hs
}

// kindText is a view's KIND column: "semaphore 3" for a semaphore of 3.
func kindText(v lockView) string {
	if v.Limit > 0 {
		return fmt.Sprintf("%s %d", v.Kind, v.Limit)
	}
	return v.Kind
}

// holderOf asks the backend who holds the lock called name; held is false
// when it is free.
func holderOf(ctx context.Context, t *target, name string) (h driver.Holder, held bool, err error) {
	info, err := t.backend.Inspect(ctx, name, driver.Exclusive)
	if err != nil || len(info.Holders) == 0 {
		return driver.Holder{}, false, err
	}
	return info.Holders[0], true, nil
}

// permitsOf asks the backend about the permit name called name; inUse is
// false when it has neither a permit nor a place in line, or the backend
// has no permits.
func permitsOf(ctx context.Context, t *target, name string) (info driver.Info, inUse bool, err error) {
	if t.permitNames == nil {
		return driver.Info{}, false, nil
	}
	// Every backend answers a permit kind with the permit name's whole
	// state, whatever its shape.
	info, err = t.backend.Inspect(ctx, name, driver.Semaphore)
	if noPermitTables(err) {
		return driver.Info{}, false, nil
	}
	if err != nil {
		return driver.Info{}, false, fmt.Errorf("inspect the permits on %s: %w", name, err)
	}
	return info, len(info.Holders) > 0 || info.Waiting > 0, nil
}

// noPermitTables reports whether err says that the permit tables of a SQL
// backend are missing: a database migrated before permits existed (or, for
// postgres-sqldb, with postgres.Migrate only) holds no permits, and its
// locks are still to be shown.
func noPermitTables(err error) bool {
	var pg *postgres.NotMigratedError
	var sq *sqldb.NotMigratedError
	return errors.As(err, &pg) || errors.As(err, &sq)
}

func ttlText(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

// permitNameView is a permit name as inspect prints it.
type permitNameView struct {
	Name string `json:"name"`
	Held bool   `json:"held"`
	// Kind is the name's shape: "semaphore" or "read-write".
	Kind       string       `json:"kind"`
	Limit      int          `json:"limit,omitempty"`
	Holders    []holderView `json:"holders"`
	Waiters    int          `json:"waiters"`
	LastWriter int64        `json:"last_writer,omitempty"`
}

// holderView is one permit of a permit name.
type holderView struct {
	Owner    string `json:"owner"`
	Kind     string `json:"kind"`
	Metadata string `json:"metadata,omitempty"`
	Token    int64  `json:"token"`
	TTLMs    int64  `json:"ttl_ms"`
}

// shapeText is how inspect names a permit name's shape.
func shapeText(info driver.Info) string {
	if info.Kind == driver.Semaphore {
		return fmt.Sprintf("semaphore of %d permits", info.Limit)
	}
	return "read-write lock"
}

func inspect(ctx context.Context, t *target, p *printer, name string) error {
	h, held, err := holderOf(ctx, t, name)
	if err != nil {
		return err
	}
	permits, inUse, err := permitsOf(ctx, t, name)
	if err != nil {
		return err
	}
	if held || !inUse {
		v := lockView{Name: name, Held: held}
		if !held {
			return p.print(v, "%s: free\n", name)
		}
		v.Kind, v.Owner, v.Metadata, v.Token, v.TTLMs = lockKind, h.Owner, h.Metadata, int64(h.Token), h.TTL.Milliseconds()
		if err := p.print(v, "%s: held\n  owner:    %s\n  metadata: %s\n  token:    %d\n  ttl:      %s\n",
			name, v.Owner, v.Metadata, v.Token, ttlText(v.TTLMs)); err != nil || !inUse {
			return err
		}
		// A lock and a permit name of one name are apart: show both.
		if !p.json {
			p.printf("\n")
		}
	}
	v := permitNameView{Name: name, Held: len(permits.Holders) > 0, Kind: "read-write", Holders: []holderView{},
		Waiters: permits.Waiting, LastWriter: int64(permits.LastWriter)}
	if permits.Kind == driver.Semaphore {
		v.Kind, v.Limit = "semaphore", permits.Limit
	}
	for _, h := range sortedHolders(permits.Holders) {
		v.Holders = append(v.Holders, holderView{Owner: h.Owner, Kind: h.Kind.String(), Metadata: h.Metadata, Token: int64(h.Token), TTLMs: h.TTL.Milliseconds()})
	}
	if p.json {
		return p.print(v, "")
	}
	p.printf("%s: %s, %d held, %d waiting", name, shapeText(permits), len(v.Holders), v.Waiters)
	if v.LastWriter > 0 {
		p.printf(", last writer token %d", v.LastWriter)
	}
	p.printf("\n")
	for i, h := range v.Holders {
		if i > 0 {
			p.printf("\n")
		}
		p.printf("  permit:   %s\n  owner:    %s\n", h.Kind, h.Owner)
		if h.Metadata != "" {
			p.printf("  metadata: %s\n", h.Metadata)
		}
		p.printf("  token:    %d\n  ttl:      %s\n", h.Token, ttlText(h.TTLMs))
	}
	return p.err
}

// listViews are the held locks and the permits in use whose names start
// with prefix, sorted by name, then locks first, then by token.
func listViews(ctx context.Context, t *target, prefix string) ([]lockView, error) {
	infos, err := t.list(ctx, prefix)
	if err != nil {
		return nil, err
	}
	views := make([]lockView, 0, len(infos))
	for _, info := range infos {
		views = append(views, viewOf(info))
	}
	if t.waiters != nil && len(infos) > 0 {
		names := make([]string, len(infos))
		for i, info := range infos {
			names[i] = info.Name
		}
		counts, err := t.waiters(ctx, names)
		if err != nil {
			return nil, fmt.Errorf("count the waiters: %w", err)
		}
		for i := range views {
			views[i].Waiters = counts[i]
		}
	}
	permits, err := permitRows(ctx, t, prefix)
	if err != nil {
		return nil, err
	}
	views = append(views, permits...)
	sortViews(views)
	return views, nil
}

// permitRows are the views of the permits in use whose names start with
// prefix, one per holder.
func permitRows(ctx context.Context, t *target, prefix string) ([]lockView, error) {
	if t.permitNames == nil {
		return nil, nil
	}
	names, err := t.permitNames(ctx, prefix)
	if noPermitTables(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var views []lockView
	for _, name := range names {
		info, _, err := permitsOf(ctx, t, name)
		if err != nil {
			return nil, err
		}
		views = append(views, permitViews(info)...)
	}
	return views, nil
}

// sortViews sorts views by name, a lock before the permits of its name,
// and these by token.
func sortViews(views []lockView) {
	sort.SliceStable(views, func(i, j int) bool { return viewLess(views[i], views[j]) })
}

// viewLess is the order of sortViews.
func viewLess(a, b lockView) bool {
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	if (a.Kind == lockKind) != (b.Kind == lockKind) {
		return a.Kind == lockKind
	}
	return a.Token < b.Token
}

func list(ctx context.Context, t *target, p *printer, prefix string) error {
	views, err := listViews(ctx, t, prefix)
	if err != nil {
		return err
	}
	if p.json {
		return p.print(views, "")
	}
	rows := make([][]string, len(views))
	for i, v := range views {
		rows[i] = []string{v.Name, kindText(v), v.Owner, fmt.Sprint(v.Token), ttlText(v.TTLMs), fmt.Sprint(v.Waiters), v.Metadata}
	}
	return p.table([]string{"NAME", "KIND", "OWNER", "TOKEN", "TTL", "WAITERS", "METADATA"}, rows)
}

// fenceView is a store key's fence as fencectl prints it.
type fenceView struct {
	Key        string `json:"key"`
	Fence      int64  `json:"fence"`
	HasValue   bool   `json:"has_value"`
	ValueBytes int    `json:"value_bytes"`
	// Store is where fencectl read it (target.storeAt).
	Store string `json:"store,omitempty"`
}

// needStore refuses a command that reads or raises fences on a target
// whose store's place the command line does not give.
func needStore(t *target, what string) error {
	if t.store == nil {
		return usagef("%s: %s", what, t.noStore)
	}
	return nil
}

func showFence(ctx context.Context, t *target, p *printer, key string) error {
	if err := needStore(t, "fence"); err != nil {
		return err
	}
	rec, err := t.store.Get(ctx, key)
	if err != nil && !errors.Is(err, fence.ErrNotFound) {
		return err
	}
	v := fenceView{Key: key, Fence: int64(rec.Fence), HasValue: err == nil, ValueBytes: len(rec.Value), Store: t.storeAt}
	switch {
	case v.HasValue:
		return p.print(v, "%s: fence %d, holds a value of %d bytes\n", key, v.Fence, v.ValueBytes)
	case v.Fence > 0:
		return p.print(v, "%s: fence %d, no value (deleted, or fenced before any write)\n", key, v.Fence)
	}
	// Say where: a store looked for in the wrong place shows every key
	// so.
	return p.print(v, "%s: no fence, no value in %s: never written there, or the store is elsewhere\n", key, v.Store)
}

// releaseView is what release did.
type releaseView struct {
	Name     string       `json:"name"`
	Kind     string       `json:"evicted_kind"` // "lock", or the permit's kind
	Token    int64        `json:"evicted_token"`
	Owner    string       `json:"evicted_owner"`
	Metadata string       `json:"evicted_metadata,omitempty"`
	Fenced   []fencedView `json:"fenced"`
	// Store is where the fences were raised (target.storeAt).
	Store    string `json:"store,omitempty"`
	Released bool   `json:"released"`
	Note     string `json:"note,omitempty"`
}

type fencedView struct {
	Key   string `json:"key"`
	Fence int64  `json:"fence"`
}

// release evicts name's holder: fences first, then the lease.
func release(ctx context.Context, t *target, p *printer, c *config, name string) error {
	if !c.force {
		return usagef("release evicts a live holder: pass --force to mean it")
	}
	if len(c.fences) == 0 && !c.noFence {
		return usagef("name the store keys the holder writes with --fence KEY (repeatable), so that its late writes are refused; --no-fence releases without fencing")
	}
	if len(c.fences) > 0 && c.noFence {
		return usagef("--fence and --no-fence together")
	}
	if c.allowUnwritten && len(c.fences) == 0 {
		return usagef("--allow-unwritten applies to --fence keys; there are none")
	}
	for _, key := range c.fences {
		if err := fence.ValidateKey(key); err != nil {
			return fmt.Errorf("--fence %q: %w", key, err)
		}
	}
	if len(c.fences) > 0 {
		if err := needStore(t, "release --fence"); err != nil {
			return err
		}
	}
	info, err := evictee(ctx, t, name, c.owner)
	if err != nil {
		return err
	}
	if err := checkWritten(ctx, t, c, name); err != nil {
		return err
	}
	v := releaseView{Name: name, Kind: lockKind, Token: int64(info.Token), Owner: info.Owner, Metadata: info.Metadata, Fenced: []fencedView{}}
	if len(c.fences) > 0 {
		v.Store = t.storeAt
	}
	if info.Kind.Permit() {
		v.Kind = info.Kind.String()
	}
	past := info.Token + 1
	for _, key := range c.fences {
		err := t.store.Advance(ctx, key, past)
		var stale *fence.StaleError
		switch {
		case err == nil:
			v.Fenced = append(v.Fenced, fencedView{key, int64(past)})
		case errors.As(err, &stale) && stale.Fence > info.Token:
			// Already past the holder's token: it is refused there anyway.
			v.Fenced = append(v.Fenced, fencedView{key, int64(stale.Fence)})
		default:
			return fmt.Errorf("raise the fence of %q to %d: %w (the lease on %s was left alone)", key, past, err, name)
		}
	}
	err = t.backend.Release(ctx, driver.Claim{Name: name, Owner: info.Owner, Kind: info.Kind})
	switch {
	case err == nil:
		v.Released = true
	case errors.Is(err, lock.ErrNotHeld):
		v.Note = "the lease ended by itself meanwhile (expired or released); a newer holder, if any, was left alone"
	default:
		return fmt.Errorf("delete the lease of %s on %s (the fences are raised): %w", info.Owner, name, err)
	}
	if p.json {
		return p.print(v, "")
	}
	what := "token"
	if v.Kind != lockKind {
		what = v.Kind + " permit token"
	}
	p.printf("%s: evicting %s %d, owner %s, metadata %q\n", name, what, v.Token, v.Owner, v.Metadata)
	if v.Store != "" {
		p.printf("  store: %s\n", v.Store)
	}
	for _, f := range v.Fenced {
		p.printf("  fence %s: %d (token %d is refused there from now on", f.Key, f.Fence, v.Token)
		if v.Kind != lockKind {
			p.printf(", and so are the other permits' lower tokens")
		}
		p.printf(")\n")
	}
	switch {
	case v.Released && v.Kind == lockKind:
		p.printf("  lease deleted: %s is free\n", name)
	case v.Released:
		p.printf("  permit released: one more is free on %s; the other holders were left alone\n", name)
	default:
		p.printf("  %s\n", v.Note)
	}
	return p.err
}

// checkWritten refuses, before anything changes, the --fence keys that
// have no record (neither a fence nor a value) in the store as the command
// line places it, unless --allow-unwritten: a store looked for in the wrong
// place (another bucket, prefix or table) shows every key so, and a fence
// raised there would be reported as protecting a key that the evicted
// holder still writes where its store really is.
func checkWritten(ctx context.Context, t *target, c *config, name string) error {
	if c.allowUnwritten {
		return nil
	}
	var unwritten []string
	for _, key := range c.fences {
		rec, err := t.store.Get(ctx, key)
		switch {
		case err == nil, rec.Fence > 0:
		case errors.Is(err, fence.ErrNotFound):
			unwritten = append(unwritten, fmt.Sprintf("%q", key))
		default:
			return fmt.Errorf("read %q in the store: %w (the lease on %s was left alone)", key, err, name)
		}
	}
	if len(unwritten) == 0 {
		return nil
	}
	return usagef("--fence %s: no record (no fence, no value) in %s, so a fence raised there may protect nothing: "+
		"if the store lives elsewhere, name its place; if the holder has yet to write the key there, add --allow-unwritten. "+
		"Nothing was changed: the lease on %s was left alone", strings.Join(unwritten, ", "), t.storeAt, name)
}

// evictee is the lease on name that release --force ends: the lock's
// holder (Kind Exclusive) or one permit, the one of owner when owner is
// not "". Several leases and no owner to choose is a usage error that
// lists them; none is a nothingError.
func evictee(ctx context.Context, t *target, name, owner string) (driver.Holder, error) {
	var all []driver.Holder
	h, held, err := holderOf(ctx, t, name)
	if err != nil {
		return driver.Holder{}, err
	}
	if held {
		h.Kind = driver.Exclusive
		all = append(all, h)
	}
	permits, _, err := permitsOf(ctx, t, name)
	if err != nil {
		return driver.Holder{}, err
	}
	all = append(all, sortedHolders(permits.Holders)...)
	if len(all) == 0 {
		return driver.Holder{}, &nothingError{fmt.Sprintf("%s is free: nothing to release", name)}
	}
	describe := func(hs []driver.Holder) string {
		parts := make([]string, len(hs))
		for i, h := range hs {
			what := "the lock"
			if h.Kind.Permit() {
				what = h.Kind.String() + " permit"
			}
			parts[i] = fmt.Sprintf("%s (%s, token %d)", h.Owner, what, h.Token)
		}
		return strings.Join(parts, ", ")
	}
	if owner != "" {
		for _, h := range all {
			if h.Owner == owner {
				return h, nil
			}
		}
		return driver.Holder{}, &nothingError{fmt.Sprintf("%s: owner %s holds neither the lock nor a permit there: nothing to release (holders: %s)", name, owner, describe(all))}
	}
	if len(all) > 1 {
		return driver.Holder{}, usagef("%s has %d holders: name the one to evict with --owner OWNER; they are %s", name, len(all), describe(all))
	}
	return all[0], nil
}

// bumpView is what bump did.
type bumpView struct {
	By       int64 `json:"by"`
	Rows     int64 `json:"rows"`
	MaxToken int64 `json:"max_token"`
}

func bump(ctx context.Context, t *target, p *printer, by int64) error {
	if t.bump == nil {
		return usagef("%s", t.noBump)
	}
	if by <= 0 {
		return usagef("bump needs --by N with N > 0: more than the tokens that may have been minted for one lock since the restore point")
	}
	res, err := t.bump(ctx, by)
	if err != nil {
		return err
	}
	v := bumpView{By: by, Rows: res.Rows, MaxToken: int64(res.MaxToken)}
	if res.summary != "" {
		return p.print(v, "%s\n", res.summary)
	}
	return p.print(v, "raised %d lease rows (the floor row included) by %d; the highest token is now %d\n", v.Rows, v.By, v.MaxToken)
}
