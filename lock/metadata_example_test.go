package lock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// Holder metadata tells an operator which process holds a lock.
// lock.DefaultMetadata() gives "host=<hostname> pid=<pid>".
func ExampleOptions_metadata() {
	ctx := context.Background()
	backend := memory.NewBackend()
	client := lock.New(backend, &lock.Options{Metadata: "instance=billing-2"})

	lease, _ := client.Acquire(ctx, "invoices", 10*time.Second)
	info, _ := backend.Inspect(ctx, "invoices")
	fmt.Printf("held=%v metadata=%q\n", info.Held, info.Metadata)

	_ = lease.Release(ctx)
	info, _ = backend.Inspect(ctx, "invoices")
	fmt.Printf("held=%v metadata=%q\n", info.Held, info.Metadata)
	// Output:
	// held=true metadata="instance=billing-2"
	// held=false metadata=""
}
