// Command member runs one embedded etcd server for the adapter's tests,
// in a process of its own, built without the race detector: the tests race
// fencekit's code, not etcd's, which runs many times slower under it. The
// test process starts it, kills it (SIGKILL) or closes its standard input to
// stop it (the server then closes gracefully), and partitions it with
// commands on its standard input, one per line:
//
//	cut NAME    drop all Raft messages to and from member NAME
//	mend NAME   undo cut
//	halt        stop the etcd server (a leader hands its leadership over
//	            first) but keep its client port open: every call is then
//	            answered "etcdserver: server stopped", as by a member that
//	            was removed from the cluster or whose server stopped on its
//	            own, until the process exits
//
// It prints "ready" once the server serves, "ok" after each command, and
// exits when its standard input closes, so it never outlives its test.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	var (
		name     = flag.String("name", "", "member name")
		dir      = flag.String("dir", "", "data directory")
		client   = flag.String("client-url", "", "client URL")
		peer     = flag.String("peer-url", "", "peer URL")
		initial  = flag.String("initial-cluster", "", "name=peer-url,...")
		state    = flag.String("state", embed.ClusterStateFlagNew, "new or existing")
		tick     = flag.Uint("tick-ms", 100, "heartbeat interval")
		election = flag.Uint("election-ms", 1000, "election timeout")
	)
	flag.Parse()
	if err := run(*name, *dir, *client, *peer, *initial, *state, *tick, *election); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		os.Exit(1)
	}
}

func run(name, dir, client, peer, initial, state string, tick, election uint) error {
	cu, err := url.Parse(client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = "fencekit-test"
	cfg.ClusterState = state
	cfg.TickMs, cfg.ElectionMs = tick, election
	// A killed member loses what the page cache had not written back only
	// if the machine goes down too; fsync on a shared CI machine would only
	// make elections flaky.
	cfg.UnsafeNoFsync = true
	cfg.Logger, cfg.LogLevel = "zap", "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return err
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		verb, other, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		if verb == "halt" {
			e.Server.Stop()
			fmt.Println("ok")
			continue
		}
		found := false
		for _, m := range e.Server.Cluster().Members() {
			if m.Name != other {
				continue
			}
			found = true
			switch verb {
			case "cut":
				e.Server.CutPeer(m.ID)
			case "mend":
				e.Server.MendPeer(m.ID)
			default:
				found = false
			}
		}
		if found {
			fmt.Println("ok")
		} else {
			fmt.Println("error: unknown command or member:", in.Text())
		}
	}
	return nil
}
