package s3_test

import (
	"context"
	"errors"
	"fmt"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/fence"
)

// A store on a bucket, written with a lease's token. client is an
// *s3.Client configured as usual (aws config.LoadDefaultConfig and
// s3.NewFromConfig).
func ExampleNewStore() {
	var client *awss3.Client // from s3.NewFromConfig(cfg)
	store := fences3.NewStore(client, "my-bucket", &fences3.Options{Prefix: "jobs/"})

	ctx := context.Background()
	var token fence.Token = 42 // lease.Token()
	err := store.Put(ctx, "report/2026-12", token, []byte("..."))
	if errors.Is(err, fence.ErrStale) {
		// a newer holder has written: stop
	}
}

// Object names are the key escaped under the prefix; long keys are hashed.
func ExampleStore_ObjectName() {
	store := fences3.NewStore(nil, "my-bucket", &fences3.Options{Prefix: "jobs/"})
	fmt.Println(store.ObjectName("report/2026-12"))
	fmt.Println(store.ObjectName("Invoice.42"))
	// Output:
	// jobs/k/report%2F2026-12
	// jobs/k/%49nvoice%2E42
}

// At startup, before the first write: a server that ignores If-Match or
// If-None-Match is refused.
func ExampleStore_VerifyServer() {
	var client *awss3.Client // from s3.NewFromConfig(cfg)
	store := fences3.NewStore(client, "my-bucket", &fences3.Options{Prefix: "jobs/"})
	if err := store.VerifyServer(context.Background()); errors.Is(err, fences3.ErrUnsafeServer) {
		// do not use this server for fenced writes
	} else if err != nil {
		// network, credentials, or fences3.ErrNoBucket
	}
}
