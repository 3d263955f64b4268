package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/internal/lab"
	"github.com/fencekit/fencekit/internal/testkit"
)

// argsEnv, when set, makes the test binary run as fencelab with these
// (separated by \x1f) arguments: lab.Main parses the process's flags once,
// so each run is a process of its own.
const argsEnv = "FENCELAB_TEST_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(argsEnv); ok {
		os.Exit(lab.Main(strings.Split(args, "\x1f")))
	}
	os.Exit(dynalitetest.Main(m))
}

// fencelab runs this binary as fencelab with args on the shared server and
// returns its exit code and output. dynalite takes any credentials; the
// SDK's default chain finds these.
func fencelab(t *testing.T, args ...string) (int, string) {
	t.Helper()
	srv := dynalitetest.Shared(t)
	args = append(args, "-backend", "dynamodb", "-dynamodb-url", srv.Endpoint)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), argsEnv+"="+strings.Join(args, "\x1f"))
	if srv.Dynalite {
		cmd.Env = append(cmd.Env, "AWS_ACCESS_KEY_ID=fencekit", "AWS_SECRET_ACCESS_KEY=fencekit-secret")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("fencelab: %v", err)
	}
	t.Logf("fencelab %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
	return code, out.String()
}

// The scenarios behave on DynamoDB as on every other backend, the
// semaphore and read-write lock scenarios included: none is skipped.
func TestScenariosOnDynamoDB(t *testing.T) {
	code, out := fencelab(t, "-ttl", "500ms")
	skipped, err := lab.Verdict(out)
	if code != 0 || err != nil {
		t.Fatalf("exit code %d, %v; want 0 and all %d scenarios as expected", code, err, lab.ScenarioCount())
	}
	if skipped != "" {
		t.Fatalf("%s; want every scenario run (the Backend serves every lock shape)", skipped)
	}
}

var chaos = []string{"chaos", "-ttl", "1s", "-duration", "6s", "-workers", "4"}

// The chaos run behind the fault proxy, which delays, cuts and drops the
// replies of the client's connection, finds no violation.
func TestChaosOnDynamoDBIsClean(t *testing.T) {
	code, out := fencelab(t, append(chaos, "-keys", "2", "-fault-every", "2s")...)
	if code != 0 {
		t.Fatalf("exit code %d; want 0 (no violation)", code)
	}
	if !strings.Contains(out, "proxy ") || !strings.Contains(out, "no violation") {
		t.Fatalf("the run did not go through the fault proxy, or found a violation")
	}
}

// Without fencing, the same workers lose increments, and the run says so.
func TestChaosOnDynamoDBUnfencedShowsViolations(t *testing.T) {
	testkit.SomeSeedShows(t, 3, "an unfenced run must exit 1 with lost increments", func(seed uint64) (bool, string) {
		code, out := fencelab(t, append(chaos, "-keys", "1", "-pause", "0.5", "-faults=false", "-unfenced", "-polling", "-seed", strconv.FormatUint(seed, 10))...)
		return code == 1 && strings.Contains(out, "lost increments"), out
	})
}
