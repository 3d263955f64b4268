// Command fencelab runs the scenarios that motivate fencekit against a real
// backend, and checks each observed outcome against the expected one.
//
//	go run ./cmd/fencelab                     # in-process backend
//	go run ./cmd/fencelab -backend redis -redis-url redis://127.0.0.1:6379/0
//	go run ./cmd/fencelab -backend postgres -postgres-url postgres://...
//	go run ./cmd/fencelab chaos -backend redis -duration 30s
//
// Each scenario prints one line with what it observed. The command exits 1
// when an outcome differs from the expected one, and 2 on a usage or setup
// error. The body is internal/lab, which adapters in modules of their own
// reuse for a fencelab that also knows their backend.
package main

import (
	"os"

	"github.com/fencekit/fencekit/internal/lab"
)

func main() { os.Exit(lab.Main(os.Args[1:])) }
