package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/internal/lab"
	"github.com/fencekit/fencekit/internal/testkit"
)

// argsEnv, when set, makes the test binary run as fencelab with these
// (separated by \x1f) arguments: lab.Main parses the process's flags once, so
// each run is a process of its own.
const argsEnv = "FENCELAB_TEST_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(argsEnv); ok {
		os.Exit(lab.Main(strings.Split(args, "\x1f")))
	}
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
}

// fencelab runs this binary as fencelab with args on the shared cluster and
// returns its exit code and output.
func fencelab(t *testing.T, args ...string) (int, string) {
	t.Helper()
	eps := strings.Join(etcdtest.Endpoints(t), ",")
	args = append(args, "-backend", "etcd", "-etcd-endpoints", eps)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), argsEnv+"="+strings.Join(args, "\x1f"))
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

// The scenarios behave on etcd as on every other backend. Their TTL
// is one second, etcd's unit: below the server's minimum lease, which only
// makes the leases they wait out last longer (they wait until a lease is
// seen free), and long enough for two round trips on a loaded machine.
func TestScenariosOnEtcd(t *testing.T) {
	code, out := fencelab(t, "-ttl", "1s")
	skipped, err := lab.Verdict(out)
	if code != 0 || err != nil {
		t.Fatalf("exit code %d, %v; want 0 and all %d scenarios as expected", code, err, lab.ScenarioCount())
	}
	// The etcd Backend serves every shape, the semaphore's and the
	// read-write lock's included; should the lab skip a scenario, this
	// says which.
	t.Run("permit scenarios", func(t *testing.T) {
		if skipped != "" {
			t.Skip(skipped)
		}
	})
}

// chaos runs workers with a TTL of etcd's minimum lease (2 s on the test
// cluster, as with etcd's defaults), so that their pauses, 1.2 to 2.5 TTLs,
// outlast the leases.
var chaos = []string{"chaos", "-ttl", "2s", "-duration", "10s", "-workers", "4"}

// The chaos run behind the fault proxy, which delays, cuts and drops the
// replies of the client's connection, finds no violation.
func TestChaosOnEtcdIsClean(t *testing.T) {
	code, out := fencelab(t, append(chaos, "-keys", "2", "-fault-every", "2s")...)
	if code != 0 {
		t.Fatalf("exit code %d; want 0 (no violation)", code)
	}
	if !strings.Contains(out, "proxy ") || !strings.Contains(out, "no violation") {
		t.Fatalf("the run did not go through the fault proxy, or found a violation")
	}
}

// Without fencing, the same workers lose increments, and the run says so.
// One key and frequent pauses make a lost update near certain; without
// network faults, nothing slows the workers that take over.
// The workers poll (-polling), as in internal/faulttest's unfenced run:
// waiting in line, they overlapped too rarely there to lose an increment.
func TestChaosOnEtcdUnfencedShowsViolations(t *testing.T) {
	testkit.SomeSeedShows(t, 3, "an unfenced run must exit 1 with lost increments", func(seed uint64) (bool, string) {
		code, out := fencelab(t, append(chaos, "-keys", "1", "-pause", "0.5", "-faults=false", "-unfenced", "-polling", "-seed", strconv.FormatUint(seed, 10))...)
		return code == 1 && strings.Contains(out, "lost increments"), out
	})
}
