package natstest

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit"
)

// TestWaitReadyReportsANodeWhosePortIsTaken: a node that exits because its
// client port is in use is reported at once as errAddrInUse (which makes
// Start pick new ports), not after WaitReady's whole timeout.
func TestWaitReadyReportsANodeWhosePortIsTaken(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		testkit.Unavailable(t, "nats-server", err.Error())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	n := &Node{Name: "n1", Port: l.Addr().(*net.TCPAddr).Port, bin: bin,
		conf: filepath.Join(dir, "n1.conf"), log: filepath.Join(dir, "n1.log")}
	conf := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n", n.Port, filepath.Join(dir, "n1"))
	if err := writeFile(n.conf, conf); err != nil {
		t.Fatal(err)
	}
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Nodes: []*Node{n}, dir: dir}
	defer c.Close()
	began := time.Now()
	err = c.WaitReady(time.Minute)
	if !errors.Is(err, errAddrInUse) {
		t.Fatalf("WaitReady = %v; want errAddrInUse", err)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("WaitReady took %v to see the node exit; want it at once, not at the timeout", d)
	}
}
