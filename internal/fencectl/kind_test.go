package fencectl

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestKindWaiters: a backend added with Register gets watch's WAITERS
// column by setting Target.Waiters; openKind hands it to watch as is.
func TestKindWaiters(t *testing.T) {
	k := Kind{Name: "fake", Flag: "fake-url", Env: "FAKE_URL", Open: func(context.Context, Options) (*Target, error) {
		return &Target{
			Waiters: func(_ context.Context, names []string) ([]int64, error) { return []int64{int64(len(names))}, nil },
			Close:   func() {},
		}, nil
	}}
	tg, err := openKind(context.Background(), k, &config{extraURLs: map[string]string{"fake": "x"}})
	require.NoError(t, err)
	require.NotNil(t, tg.waiters)
	counts, err := tg.waiters(context.Background(), []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, []int64{2}, counts)
}
