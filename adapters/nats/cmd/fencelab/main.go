// Command fencelab is fencekit's fencelab with one more backend, NATS
// JetStream KV:
//
//	fencelab -backend nats -nats-url nats://127.0.0.1:4222
//	fencelab chaos -backend nats -ttl 2s -duration 10s
//
// The server must be nats-server 2.11 or later (per-key TTL). It lives in
// the NATS adapter's module, so the root module's fencelab does not pull in
// nats.go.
package main

import (
	"os"

	"github.com/fencekit/fencekit/internal/lab"
)

func main() { os.Exit(lab.Main(os.Args[1:])) }
