package fencectl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// lockView is a lock as fencectl prints it.
type lockView struct {
	Name     string `json:"name"`
	Held     bool   `json:"held"`
	Owner    string `json:"owner,omitempty"`
	Metadata string `json:"metadata,omitempty"`
	Token    int64  `json:"token,omitempty"`
	TTLMs    int64  `json:"ttl_ms,omitempty"`
}

func viewOf(info lock.Info) lockView {
	return lockView{Name: info.Name, Held: info.Held, Owner: info.Owner, Metadata: info.Metadata,
		Token: int64(info.Token), TTLMs: info.TTL.Milliseconds()}
}

func ttlText(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

func inspect(ctx context.Context, t *target, p *printer, name string) error {
	info, err := t.backend.Inspect(ctx, name)
	if err != nil {
		return err
	}
	v := viewOf(info)
	if !info.Held {
		return p.print(v, "%s: free\n", name)
	}
	return p.print(v, "%s: held\n  owner:    %s\n  metadata: %s\n  token:    %d\n  ttl:      %s\n",
		name, v.Owner, v.Metadata, v.Token, ttlText(v.TTLMs))
}

func list(ctx context.Context, t *target, p *printer, prefix string) error {
	infos, err := t.list(ctx, prefix)
	if err != nil {
		return err
	}
	views := make([]lockView, len(infos))
	rows := make([][]string, len(infos))
	for i, info := range infos {
		views[i] = viewOf(info)
		rows[i] = []string{info.Name, fmt.Sprint(views[i].Token), ttlText(views[i].TTLMs), info.Metadata}
	}
	if p.json {
		return p.print(views, "")
	}
	return p.table([]string{"NAME", "TOKEN", "TTL", "METADATA"}, rows)
}

// fenceView is a store key's fence as fencectl prints it.
type fenceView struct {
	Key        string `json:"key"`
	Fence      int64  `json:"fence"`
	HasValue   bool   `json:"has_value"`
	ValueBytes int    `json:"value_bytes"`
}

func showFence(ctx context.Context, t *target, p *printer, key string) error {
	rec, err := t.store.Get(ctx, key)
	if err != nil && !errors.Is(err, fence.ErrNotFound) {
		return err
	}
	v := fenceView{Key: key, Fence: int64(rec.Fence), HasValue: err == nil, ValueBytes: len(rec.Value)}
	switch {
	case v.HasValue:
		return p.print(v, "%s: fence %d, holds a value of %d bytes\n", key, v.Fence, v.ValueBytes)
	case v.Fence > 0:
		return p.print(v, "%s: fence %d, no value (deleted, or fenced before any write)\n", key, v.Fence)
	}
	return p.print(v, "%s: no fence, no value (never written)\n", key)
}

// releaseView is what release did.
type releaseView struct {
	Name     string       `json:"name"`
	Token    int64        `json:"evicted_token"`
	Owner    string       `json:"evicted_owner"`
	Metadata string       `json:"evicted_metadata,omitempty"`
	Fenced   []fencedView `json:"fenced"`
	Released bool         `json:"released"`
	Note     string       `json:"note,omitempty"`
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
	for _, key := range c.fences {
		if err := fence.ValidateKey(key); err != nil {
			return fmt.Errorf("--fence %q: %w", key, err)
		}
	}
	info, err := t.backend.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if !info.Held {
		return &nothingError{fmt.Sprintf("%s is free: nothing to release", name)}
	}
	if info.Token >= fence.MaxToken {
		return fmt.Errorf("%s: the holder's token %d is the last one; no fence can be raised past it", name, info.Token)
	}
	v := releaseView{Name: name, Token: int64(info.Token), Owner: info.Owner, Metadata: info.Metadata, Fenced: []fencedView{}}
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
	err = t.backend.Release(ctx, name, info.Owner)
	switch {
	case err == nil:
		v.Released = true
	case errors.Is(err, lock.ErrNotHeld):
		v.Note = "the lease ended by itself meanwhile (expired or released); a newer holder, if any, was left alone"
	default:
		return fmt.Errorf("delete the lease on %s (the fences are raised): %w", name, err)
	}
	if p.json {
		return p.print(v, "")
	}
	p.printf("%s: evicting token %d, owner %s, metadata %q\n", name, v.Token, v.Owner, v.Metadata)
	for _, f := range v.Fenced {
		p.printf("  fence %s: %d (token %d is refused there from now on)\n", f.Key, f.Fence, v.Token)
	}
	if v.Released {
		p.printf("  lease deleted: %s is free\n", name)
	} else {
		p.printf("  %s\n", v.Note)
	}
	return p.err
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
