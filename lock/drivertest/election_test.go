package drivertest_test

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// electionCheck returns the named election check.
func electionCheck(t *testing.T, name string) drivertest.ElectionCheck {
	t.Helper()
	for _, c := range drivertest.ElectionChecks() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no election check %q", name)
	return drivertest.ElectionCheck{}
}

// acceptAll is a store without fencing: every write lands.
type acceptAll struct{ *memory.Store }

func (s acceptAll) Put(ctx context.Context, key string, _ fence.Token, v []byte) error {
	return s.Store.Put(ctx, key, 1, v)
}

func (s acceptAll) Delete(ctx context.Context, key string, _ fence.Token) error {
	return s.Store.Delete(ctx, key, 1)
}

func (acceptAll) Advance(context.Context, string, fence.Token) error { return nil }

// Each election check fails on a backend or store that breaks what it
// checks.
func TestElectionChecksCatchBrokenBackends(t *testing.T) {
	for _, tc := range []struct {
		check string
		f     flaws
		store fence.Store
	}{
		{"OneLeaderAtATime", flaws{noExclusion: true}, memory.NewStore()},         // two leaders at once
		{"OneLeaderAtATime", flaws{resetOnRelease: true}, memory.NewStore()},      // a term given twice
		{"PausedLeaderFenced", flaws{}, acceptAll{memory.NewStore()}},             // the old leader's write lands
		{"CampaignBoundedByContext", flaws{noExclusion: true}, memory.NewStore()}, // a second leader while one leads
	} {
		c := electionCheck(t, tc.check)
		ctx, cancel := context.WithTimeout(context.Background(), drivertest.Timeout)
		err := c.Run(ctx, newFlawed(tc.f), tc.store, drivertest.Namespace())
		cancel()
		if err == nil {
			t.Errorf("%s passed a broken backend or store (%+v, %T)", tc.check, tc.f, tc.store)
		} else {
			t.Logf("%s: %v", tc.check, err)
		}
	}
}
