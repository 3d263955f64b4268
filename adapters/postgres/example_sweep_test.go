package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/lock"
)

// A periodic job keeps the lease table bounded: Sweep deletes the rows of
// locks free for at least the idle time, and the next holder of a swept
// lock still gets a higher token.
func ExampleBackend_Sweep() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleURL) // e.g. os.Getenv("DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		log.Fatal(err)
	}
	backend := postgres.NewBackend(pool, nil)
	locks := lock.New(backend, nil)

	lease, err := locks.Acquire(ctx, "invoice-42", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	first := lease.Token()
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// A real job sweeps rows idle for an hour or so; here, at once.
	n, err := backend.Sweep(ctx, time.Microsecond)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("swept the idle row:", n >= 1) // and any other idle rows

	lease, err = locks.Acquire(ctx, "invoice-42", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	fmt.Println("token rose:", lease.Token() > first)
	// Output:
	// swept the idle row: true
	// token rose: true
}
