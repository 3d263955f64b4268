package contention

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.99: 10, 1: 10, 0.1: 1} {
		if got := percentile(ds, q); got != want {
			t.Errorf("percentile(%v) = %v; want %v", q, got, want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v; want 0", got)
	}
}

func TestCV(t *testing.T) {
	if got := cv([]int{10, 10, 10}); got != 0 {
		t.Errorf("cv of equal counts = %v; want 0", got)
	}
	if got := cv([]int{0, 20}); math.Abs(got-1) > 1e-9 {
		t.Errorf("cv(0, 20) = %v; want 1", got)
	}
	if got := cv([]int{0, 0}); !math.IsNaN(got) {
		t.Errorf("cv of no acquisitions = %v; want NaN", got)
	}
}

// TestRunFIFOFloor runs the in-process floor briefly: every worker is served
// and the waits are counted.
func TestRunFIFOFloor(t *testing.T) {
	row := Rows(nil)[0]
	r, err := Run(context.Background(), row, "l", 4, time.Millisecond, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Acquisitions == 0 || r.MinPerWorker == 0 || !math.IsNaN(r.CommandsPerAcquisition) {
		t.Fatalf("result %+v: want acquisitions by every worker and no command count", r)
	}
}

// TestRunCountsWork: a row with a Work counter (the SQL rows) reports its
// server work per acquisition.
func TestRunCountsWork(t *testing.T) {
	row := Rows(nil)[0]
	var n atomic.Int64
	inner := row.New
	row.New = func(name string, worker int) (Locker, error) {
		l, err := inner(name, worker)
		if err != nil {
			return nil, err
		}
		return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
			n.Add(3) // three statements per acquisition
			return l.Lock(ctx)
		}), nil
	}
	row.Work = func(context.Context) (int64, error) { return n.Load(), nil }
	r, err := Run(context.Background(), row, "l", 2, time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Acquisitions == 0 || math.Abs(r.CommandsPerAcquisition-3) > 0.5 {
		t.Fatalf("result %+v: want about 3 per acquisition", r)
	}
}
