package drivertest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
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
	mdNotValidated          // bad metadata accepted and stored (harmless now: the Client never sends any)
	mdNewlineEscaped        // newlines stored as a literal \n (spliced into a script)
)

// mdBackend keeps the metadata of single locks beside the memory backend
// it embeds (which it sends none), with one flaw.
type mdBackend struct {
	driver.Backend
	flaw mdFlaw

	mu    sync.Mutex
	md    map[string]string
	owner map[string]string
}

func newMDBackend(f mdFlaw) *mdBackend {
	return &mdBackend{Backend: memory.NewBackend(), flaw: f, md: map[string]string{}, owner: map[string]string{}}
}

func (b *mdBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind != driver.Exclusive || req.Names != nil || req.Resume {
		return b.Backend.Acquire(ctx, req)
	}
	name, owner, md := req.Name, req.Owner, req.Metadata
	if b.flaw != mdNotValidated {
		if err := driver.ValidateMetadata(md); err != nil {
			return driver.Grant{}, err
		}
	}
	req.Metadata = ""
	tok, err := b.Backend.Acquire(ctx, req)
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
		if errors.Is(err, driver.ErrHeld) {
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

func (b *mdBackend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	info, err := b.Backend.Inspect(ctx, name, kind)
	if err != nil || kind != driver.Exclusive || len(info.Holders) == 0 || b.flaw == mdDropped {
		return info, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	info.Holders[0].Metadata = b.md[name]
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

func metadataCheckNamed(t *testing.T, name string) drivertest.Check {
	for _, c := range metadataChecks() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no metadata check named %s", name)
	return drivertest.Check{}
}

// metadataChecks are the checks of holder metadata.
func metadataChecks() []drivertest.Check {
	var checks []drivertest.Check
	for _, c := range allChecks() {
		if strings.Contains(c.Name, "Metadata") {
			checks = append(checks, c)
		}
	}
	return checks
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
// every metadata check; so does one that accepts bad metadata, since the
// Client refuses it before anything is sent (the checks of bad metadata
// show that nothing was).
func TestMetadataChecksPassCorrectBackends(t *testing.T) {
	for _, c := range metadataChecks() {
		for _, b := range []driver.Backend{newMDBackend(mdCorrect), memory.NewBackend(), newMDBackend(mdNotValidated)} {
			if err := runCheck(c, b); err != nil {
				t.Errorf("%s on %T: %v", c.Name, b, err)
			}
		}
	}
}

// Run runs every metadata check once: they are in Checks, each under a
// name of its own.
func TestMetadataChecksRunByRun(t *testing.T) {
	want := []string{"MetadataVisibleInInspect", "MetadataRoundTripsExactly", "MetadataReplacedBySameOwnerAcquire", "MetadataKeptByExtendAndRefusals",
		"MetadataGoneAfterRelease", "MetadataGoneAfterExpiry", "InvalidMetadataRefused", "ClientMetadataVisible", "ClientInvalidMetadataRefused"}
	seen := map[string]int{}
	for _, c := range allChecks() {
		seen[c.Name]++
	}
	for _, name := range want {
		if seen[name] != 1 {
			t.Errorf("Checks has %d checks named %s; want 1", seen[name], name)
		}
	}
}
