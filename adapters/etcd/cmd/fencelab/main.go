// Command fencelab is fencekit's fencelab with one more backend, etcd:
//
//	fencelab -backend etcd -etcd-endpoints http://127.0.0.1:2379
//	fencelab chaos -backend etcd -ttl 2s -duration 10s
//
// It lives in the etcd adapter's module, so the root module's fencelab does
// not pull in etcd's client.
package main

import (
	"os"

	"github.com/fencekit/fencekit/internal/lab"
)

func main() { os.Exit(lab.Main(os.Args[1:])) }
