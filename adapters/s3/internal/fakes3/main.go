// Command fakes3 serves gofakes3 (github.com/johannesboyne/gofakes3) with
// its in-memory backend s3mem on a loopback address, with one bucket, for
// the tests of adapters/s3 (internal/s3server builds and starts it).
//
// It is a module of its own so that gofakes3's requirements stay out of
// adapters/s3's go.mod. s3mem checks a PUT's If-Match / If-None-Match and
// stores the object under one write lock, and answers HEAD and GET from one
// stored version under a read lock: the fenced store needs the first and a
// GET whose ETag is never newer than its body (adapters/s3
// TestConditionalPutIsAtomic, TestReadIsConsistent).
// gofakes3 does not check request signatures.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	bucket := flag.String("bucket", "fencekit-test", "bucket to create")
	flag.Parse()
	if err := run(*addr, *bucket); err != nil {
		fmt.Fprintln(os.Stderr, "fakes3:", err)
		os.Exit(1)
	}
}

func run(addr, bucket string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("address %q is not a loopback address", addr)
	}
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		return fmt.Errorf("create bucket %q: %w", bucket, err)
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", l.Addr())
	return http.Serve(l, faker.Server()) // until the process is killed
}
