package natstest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// OldServer starts, for t, the nats-server found in PATH if it is older
// than 2.11 (no per-message TTL), with JetStream on a free loopback port,
// and returns its URL; ok is false when there is no such binary.
func OldServer(t testing.TB) (url string, ok bool) {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		return "", false
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", false
	}
	v := strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(string(out), "nats-server:")), "v")
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return "", false
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(parts[1])
	if major != 2 || minor >= 11 {
		return "", false
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := &Node{Name: "old", Port: ports[0], bin: bin, log: dir + "/old.log", conf: dir + "/old.conf"}
	conf := fmt.Sprintf("listen: \"127.0.0.1:%d\"\nmax_payload: 2MB\njetstream { store_dir: %q }\n", n.Port, dir+"/data")
	if err := writeFile(n.conf, conf); err != nil {
		t.Fatal(err)
	}
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	c := &Cluster{Nodes: []*Node{n}}
	if err := c.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return n.URL(), true
}
