package containers

import (
	"os"
	"testing"
)

// RequireEnv is the environment variable that turns a missing Docker engine
// from a skip into a failure. It is not FENCEKIT_REQUIRE_BACKENDS: a machine
// can have every server the root module's tests need and no Docker.
const RequireEnv = "FENCEKIT_REQUIRE_CONTAINERS"

// unavailable skips t, or fails it when FENCEKIT_REQUIRE_CONTAINERS=1,
// saying why no container could be started.
func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s container unavailable and %s=1: %v", what, RequireEnv, err)
		return
	}
	t.Skipf("%s container unavailable (%v); run Docker, or set %s=1 to make this a failure", what, err, RequireEnv)
}
