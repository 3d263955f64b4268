package fenceotel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// The whole driver contract, every shape, through the traced backend: the
// wrapper keeps every capability of what it wraps. drivertest reports a
// shape answered with driver.ErrUnsupported as a skipped gap; noGaps turns
// that into a failure here, since memory and Redis serve every shape.

func TestDriverConformanceThroughTelemetryOnMemory(t *testing.T) {
	r := newRig(t, true)
	drivertest.Run(t, func(t *testing.T) driver.Backend { return noGaps(t, r.tel.Backend(memory.NewBackend())) })
}

func TestDriverConformanceThroughTelemetryOnRedis(t *testing.T) {
	r := newRig(t, true)
	client := testkit.Redis(t)
	drivertest.Run(t, func(t *testing.T) driver.Backend {
		return noGaps(t, r.tel.Backend(redis.NewBackend(client, &redis.BackendOptions{Prefix: testkit.RedisPrefix(t, client)})))
	})
}

// noGaps fails t when any Acquire through b answers driver.ErrUnsupported.
func noGaps(t *testing.T, b driver.Backend) driver.Backend { return gapless{Backend: b, t: t} }

type gapless struct {
	driver.Backend
	t *testing.T
}

func (g gapless) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	grant, err := g.Backend.Acquire(ctx, req)
	if errors.Is(err, driver.ErrUnsupported) {
		g.t.Errorf("the traced backend refused a %v request (names %d, place %v, resume %v): %v", req.Kind, len(req.Names), req.Place, req.Resume, err)
	}
	return grant, err
}
