// Command fencelab is fencekit's fencelab (see cmd/fencelab in the root
// module) with one more backend, s3: the fenced store on an S3-compatible
// bucket, the locks on memory or Redis.
//
//	go run ./cmd/fencelab -backend s3 -s3-endpoint http://127.0.0.1:7070 -s3-bucket b
//	go run ./cmd/fencelab -backend s3 -s3-lock redis -redis-url redis://127.0.0.1:6379/0 -s3-bucket b
//	go run ./cmd/fencelab chaos -backend s3 -s3-endpoint http://127.0.0.1:7070 -s3-bucket b -duration 10s
//
// The chaos run puts its fault proxy between the store's S3 client and the
// server (delays, cuts, lost replies); the locks are not proxied.
//
// Credentials and the region come from the AWS SDK's default chain
// (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a shared profile, ...).
// Before its first write the run calls the store's VerifyServer, and stops
// with its error (matching ErrUnsafeServer) on a server that does not honour
// the conditional writes the store needs.
//
// The run writes only under a prefix of its own and leaves its objects
// behind (tombstones are the point of the store); give the bucket a
// lifecycle rule or use a scratch bucket.
package main

import (
	"os"

	"github.com/fencekit/fencekit/internal/lab"
)

func init() {
	lab.RegisterBackend("s3", openS3)
	lab.RegisterProxied("s3", proxiedS3)
}

func main() { os.Exit(lab.Main(os.Args[1:])) }
