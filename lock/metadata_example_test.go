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
	info, _ := lock.New(backend, nil).Inspect(ctx, "invoices") // any Client sees it
	fmt.Printf("held=%v metadata=%q\n", info.Held(), info.Holders[0].Metadata)

	_ = lease.Release(ctx)
	info, _ = client.Inspect(ctx, "invoices")
	fmt.Printf("held=%v holders=%d\n", info.Held(), len(info.Holders))
	// Output:
	// held=true metadata="instance=billing-2"
	// held=false holders=0
}
