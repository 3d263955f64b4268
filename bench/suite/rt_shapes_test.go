package suite

import "testing"

// Each store that hosts the lock-shape cases has every shape operation and
// the single-name baselines they are compared with, so that shapecost's
// ratios always have a same-run baseline.
func TestShapeCasesHaveTheirBaselines(t *testing.T) {
	have := map[[3]string]bool{}
	for _, c := range rtCases {
		have[[3]string{c.Store, c.Op, c.Lib}] = true
	}
	for _, store := range []string{"Redis", "PostgreSQL"} {
		for _, want := range [][2]string{
			{OpSetOf2, "fencekit TryAcquireMulti + MultiLease.Release"},
			{OpSetOf2, "fencekit 2 x (TryAcquire + Release)"},
			{OpResume, "fencekit Client.Resume"},
			{OpExtendRS, "fencekit Lease.Extend"},
			{OpLockCycle, "fencekit TryAcquire + Release"},
			{OpSemaphore, "fencekit Semaphore.TryAcquire + Release (2 permits, 1 other held)"},
			{OpReadPermit, "fencekit RWLock.TryAcquireRead + Release (1 other reader)"},
			{OpWritePermit, "fencekit RWLock.TryAcquireWrite + Release"},
		} {
			if !have[[3]string{store, want[0], want[1]}] {
				t.Errorf("no round-trip case %s / %s / %s", store, want[0], want[1])
			}
		}
	}
}
