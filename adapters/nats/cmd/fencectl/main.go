// Command fencectl is fencekit's fencectl (see cmd/fencectl) with one more
// backend, NATS JetStream KV:
//
//	fencectl --nats-url nats://127.0.0.1:4222 --nats-bucket locks list
//	FENCEKIT_NATS_URL=nats://a:4222,nats://b:4222 FENCEKIT_NATS_BUCKET=locks fencectl watch jobs/
//
// --nats-bucket (or FENCEKIT_NATS_BUCKET) names the KV bucket of the
// leases, --nats-store-bucket (or FENCEKIT_NATS_STORE_BUCKET) the fenced
// store's, the same bucket when not given: the bucket arguments of the
// adapter's NewBackend and NewStore. --prefix and --store-prefix are its
// BackendOptions.Prefix and StoreOptions.Prefix (default "fencekit").
// inspect, list, fence, release --force and watch work as on the other
// backends; watch has no WAITERS column (NATS has no queue). bump --by N,
// after restoring the lease bucket, runs Backend.Bump: it purges the lease
// bucket and raises its stream sequence by N, so that every new token is
// above every earlier one; it refuses (exit 2, nothing changed) a bucket
// that holds anything but leases, such as the store's records
// (docs/operations.md, "After a restore").
//
// It lives in the NATS adapter's module, so the root module's fencectl
// does not pull in nats.go.
package main

import (
	"io"
	"os"
	"strings"

	"github.com/fencekit/fencekit/internal/fencectl"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)) }

// run is fencectl with the NATS bucket flags taken out of args (the shared
// command code knows one server flag per backend) and kept for openNats.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	buckets = bucketNames{lock: getenv(bucketEnv), store: getenv(storeBucketEnv)}
	rest, err := takeBucketFlags(args, &buckets)
	if err != nil {
		_, _ = io.WriteString(stderr, "fencectl: "+err.Error()+"\n")
		return 2
	}
	return fencectl.Main(rest, stdin, stdout, stderr, getenv)
}

// bucketNames are the KV buckets of the leases and of the fenced store.
type bucketNames struct{ lock, store string }

// buckets is what the command line and the environment named, for
// openNats, which fencectl.Main calls.
var buckets bucketNames

// takeBucketFlags removes --nats-bucket and --nats-store-bucket (with one
// or two dashes, "=V" or " V") from args, up to a "--", and sets them in b.
func takeBucketFlags(args []string, b *bucketNames) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i:]...), nil
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		var dst *string
		switch {
		case !strings.HasPrefix(a, "-"):
		case name == bucketFlag:
			dst = &b.lock
		case name == storeBucketFlag:
			dst = &b.store
		}
		if dst == nil {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return nil, usageError("flag needs an argument: -" + name)
			}
			i++
			value = args[i]
		}
		*dst = value
	}
	return rest, nil
}

type usageError string

func (e usageError) Error() string { return string(e) }
