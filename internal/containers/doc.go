// Package containers runs fencekit's conformance suites and fault kits
// against Redis, PostgreSQL and MariaDB (adapters/sqldb with sqldb.MySQL)
// in Docker containers, through testcontainers-go.
//
// It is a module of its own (github.com/fencekit/fencekit/internal/containers)
// so that testcontainers, the Docker client and OpenTelemetry, which
// testcontainers needs, never become requirements of the root module: every
// module a root-module test imports is listed in the root go.mod, and with
// module graph pruning every consumer of fencekit then sees it in
// `go list -m all`, and its scanners flag Docker's advisories in programs
// that never run a container. The root module's tests find their servers
// without Docker (see internal/testkit).
//
// Without a reachable Docker engine the tests skip, unless
// FENCEKIT_REQUIRE_CONTAINERS=1, which makes that a failure.
// FENCEKIT_REDIS_IMAGE, FENCEKIT_POSTGRES_IMAGE and FENCEKIT_MYSQL_IMAGE
// choose the images.
package containers
