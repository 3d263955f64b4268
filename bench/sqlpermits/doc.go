// Package sqlpermits holds a stress benchmark of the sqldb adapter's
// permits on MariaDB (Hardening IV, item 4): 24 goroutines acquire and
// release semaphore permits (2 per name) on 8 names at once, straight
// through driver.Backend, and count what comes back: permits, refusals
// (ErrHeld) and any other error, which there should be none of. It is a
// benchmark, not a test: nothing fails on a figure, and errors are
// reported as a metric.
//
//	cd bench && go test -run '^$' -bench PermitManyNames -benchtime 3000x ./sqlpermits
//
// The server is FENCEKIT_BENCH_MYSQL_URL, default
// root@tcp(127.0.0.1:3306)/test; the benchmark creates a database of its own
// there and drops it. Without a server, or with the variable set to "off",
// it is skipped.
package sqlpermits
