// Command fencectl is fencekit's fencectl (see cmd/fencectl) with one more
// backend, etcd:
//
//	fencectl --etcd-endpoints http://127.0.0.1:2379 list
//	FENCEKIT_ETCD_ENDPOINTS=http://a:2379,http://b:2379 fencectl watch jobs/
//
// inspect, list, fence, release --force and watch work as on the other
// backends, with --prefix and --store-prefix as the adapter's
// BackendOptions.Prefix and StoreOptions.Prefix. bump refuses: an etcd
// token is a revision, which a client raises only by one per write; restore
// a snapshot with etcdutl snapshot restore --bump-revision N
// --mark-compacted instead (docs/operations.md, "After a restore").
//
// It lives in the etcd adapter's module, so the root module's fencectl does
// not pull in etcd's client.
package main

import (
	"os"

	"github.com/fencekit/fencekit/internal/fencectl"
)

func main() { os.Exit(fencectl.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)) }
