package containers

import (
	"context"
	"fmt"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// PostgresImageEnv overrides DefaultPostgresImage.
const PostgresImageEnv = "FENCEKIT_POSTGRES_IMAGE"

// DefaultPostgresImage is the official image the PostgreSQL container runs.
const DefaultPostgresImage = "postgres:16-alpine"

var postgresContainer started

// PostgresURL returns the URL of a PostgreSQL container shared by every test
// of the test binary, started on the first call. Tests must keep to a schema
// or tables of their own (testkit.PostgresAt). Without Docker, t is skipped,
// or failed under FENCEKIT_REQUIRE_CONTAINERS=1.
func PostgresURL(t testing.TB) string {
	t.Helper()
	url, err := postgresContainer.get(func(ctx context.Context) (string, error) {
		img := image(PostgresImageEnv, DefaultPostgresImage)
		ctr, err := tcpostgres.Run(ctx, img,
			tcpostgres.WithDatabase("test"),
			tcpostgres.WithUsername("postgres"),
			tcpostgres.WithPassword("postgres"),
			tcpostgres.BasicWaitStrategies(),
		)
		if err != nil {
			if ctr != nil {
				_ = testcontainers.TerminateContainer(ctr)
			}
			return "", fmt.Errorf("postgres container %s: %w", img, err)
		}
		return ctr.ConnectionString(ctx, "sslmode=disable")
	})
	if err != nil {
		unavailable(t, "PostgreSQL", err)
	}
	// CI greps for "path:" to show which path each test took.
	t.Logf("path: PostgreSQL container, image %s, at %s", image(PostgresImageEnv, DefaultPostgresImage), url)
	return url
}
