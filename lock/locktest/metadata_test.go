package locktest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// mdFlaw is a realistic bug in how a backend keeps holder metadata.
type mdFlaw int

const (
	mdCorrect        mdFlaw = iota
	mdDropped               // Inspect never reports metadata
	mdKeepFirst             // a same-owner Acquire keeps the first metadata
	mdOnlyNonEmpty          // empty metadata does not overwrite (COALESCE(NULLIF($4, ''), metadata))
	mdSetByRefusal          // a refused Acquire still writes its metadata
	mdTruncated             // metadata cut at 255 bytes (a varchar(255) column)
	mdTrimmed               // surrounding whitespace stripped
	mdNotValidated          // bad metadata accepted and stored
	mdNewlineEscaped        // newlines stored as a literal \n (spliced into a script)
)

// mdBackend keeps metadata beside a memory.Backend, with one flaw.
type mdBackend struct {
	*memory.Backend
	flaw mdFlaw

	mu    sync.Mutex
	md    map[string]string
	owner map[string]string
}

func newMDBackend(f mdFlaw) *mdBackend {
	return &mdBackend{Backend: memory.NewBackend(), flaw: f, md: map[string]string{}, owner: map[string]string{}}
}

func (b *mdBackend) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	md := lock.MetadataFromContext(ctx)
	if b.flaw != mdNotValidated {
		if err := lock.ValidateMetadata(md); err != nil {
			return 0, err
		}
	}
	tok, err := b.Backend.Acquire(lock.ContextWithMetadata(ctx, ""), name, owner, ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.flaw {
	case mdKeepFirst:
		if err == nil && b.owner[name] == owner {
			return tok, nil
		}
	case mdOnlyNonEmpty:
		if md == "" {
			b.owner[name] = owner
			return tok, err
		}
	case mdSetByRefusal:
		if errors.Is(err, lock.ErrHeld) {
			b.md[name] = md
		}
	case mdTruncated:
		if len(md) > 255 {
			md = md[:255]
		}
	case mdTrimmed:
		md = trimSpace(md)
	case mdNewlineEscaped:
		md = replaceNewlines(md)
	}
	if err == nil {
		b.md[name], b.owner[name] = md, owner
	}
	return tok, err
}

func (b *mdBackend) Inspect(ctx context.Context, name string) (lock.Info, error) {
	info, err := b.Backend.Inspect(ctx, name)
	if err != nil || !info.Held || b.flaw == mdDropped {
		return info, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	info.Metadata = b.md[name]
	return info, nil
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\n') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\n') {
		s = s[:len(s)-1]
	}
	return s
}

func replaceNewlines(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, '\\', 'n')
			continue
		}
		out = append(out, s[i])
	}
	return string(out)
}

func metadataCheckNamed(t *testing.T, name string) locktest.Check {
	for _, c := range locktest.MetadataChecks() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no metadata check named %s", name)
	return locktest.Check{}
}

// Each metadata check fails on a backend that keeps metadata wrongly in the
// way it guards against.
func TestMetadataChecksCatchBrokenBackends(t *testing.T) {
	cases := []struct {
		bug      string
		flaw     mdFlaw
		mustFail []string
	}{
		{"reports no metadata", mdDropped, []string{"MetadataVisibleInInspect", "MetadataRoundTripsExactly", "MetadataReplacedBySameOwnerAcquire", "MetadataKeptByExtendAndRefusals", "MetadataGoneAfterExpiry", "ClientMetadataVisible"}},
		{"keeps the first metadata of an owner", mdKeepFirst, []string{"MetadataReplacedBySameOwnerAcquire"}},
		{"lets empty metadata keep the last one", mdOnlyNonEmpty, []string{"MetadataReplacedBySameOwnerAcquire", "MetadataGoneAfterRelease"}},
		{"stores a refused Acquire's metadata", mdSetByRefusal, []string{"MetadataKeptByExtendAndRefusals"}},
		{"cuts metadata at 255 bytes", mdTruncated, []string{"MetadataRoundTripsExactly"}},
		{"trims whitespace", mdTrimmed, []string{"MetadataRoundTripsExactly"}},
		{"escapes newlines", mdNewlineEscaped, []string{"MetadataRoundTripsExactly", "ClientMetadataVisible"}},
		{"accepts bad metadata", mdNotValidated, []string{"InvalidMetadataRefused"}},
	}
	for _, c := range cases {
		t.Run(c.bug, func(t *testing.T) {
			t.Parallel()
			for _, name := range c.mustFail {
				if err := runCheck(metadataCheckNamed(t, name), newMDBackend(c.flaw)); err == nil {
					t.Errorf("check %s passed on a backend that %s", name, c.bug)
				} else {
					t.Logf("%s: %v", name, err)
				}
			}
		})
	}
}

// A backend that keeps metadata correctly, and the memory backend, pass
// every metadata check.
func TestMetadataChecksPassCorrectBackends(t *testing.T) {
	locktest.RunMetadata(t, func(*testing.T) lock.Backend { return newMDBackend(mdCorrect) })
	locktest.RunMetadata(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}

func TestMetadataChecksHaveUniqueNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range allChecks() {
		seen[c.Name] = true
	}
	for _, c := range locktest.MetadataChecks() {
		if seen[c.Name] {
			t.Errorf("two checks are named %s", c.Name)
		}
		seen[c.Name] = true
	}
}
