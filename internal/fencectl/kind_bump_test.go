package fencectl

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/internal/testkit/require"
)

// errFakeRefusal stands for a backend's own refusal sentinel.
var errFakeRefusal = errors.New("fake: bump refused")

// TestKindBump: a backend added with Register gets bump by setting
// Target.Bump; its Summary is the line printed, and a refusal wrapped with
// Refused is a usage error (exit 2) that still matches the backend's
// sentinel. Without Bump, bump refuses with NoBump.
func TestKindBump(t *testing.T) {
	k := Kind{Name: "fake", Flag: "fake-url", Env: "FAKE_URL", Open: func(context.Context, Options) (*Target, error) {
		return &Target{
			Bump: func(_ context.Context, by int64) (BumpResult, error) {
				if by == 1 {
					return BumpResult{}, Refused(errFakeRefusal)
				}
				return BumpResult{Rows: 3, MaxToken: 42, Summary: "fake raised"}, nil
			},
			Close: func() {},
		}, nil
	}}
	tg, err := openKind(context.Background(), k, &config{extraURLs: map[string]string{"fake": "x"}})
	require.NoError(t, err)

	var out bytes.Buffer
	require.NoError(t, bump(context.Background(), tg, &printer{out: &out}, 2))
	require.Equal(t, "fake raised\n", out.String())
	out.Reset()
	require.NoError(t, bump(context.Background(), tg, &printer{out: &out, json: true}, 2))
	require.Contains(t, out.String(), `"max_token": 42`)

	err = bump(context.Background(), tg, &printer{out: &out}, 1)
	require.ErrorIs(t, err, errFakeRefusal)
	var usage *usageError
	require.True(t, errors.As(err, &usage), "a refusal is a usage error: exit 2")
	require.Equal(t, errFakeRefusal.Error(), err.Error())

	k.Open = func(context.Context, Options) (*Target, error) {
		return &Target{NoBump: "no bump here", Close: func() {}}, nil
	}
	tg, err = openKind(context.Background(), k, &config{extraURLs: map[string]string{"fake": "x"}})
	require.NoError(t, err)
	err = bump(context.Background(), tg, &printer{out: &out}, 2)
	require.True(t, errors.As(err, &usage))
	require.Equal(t, "no bump here", err.Error())
}
