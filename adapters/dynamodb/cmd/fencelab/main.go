// Command fencelab is fencekit's fencelab with one more backend, DynamoDB:
// the lock Backend and the fenced Store of adapters/dynamodb on a table of
// the run's own, which it makes and deletes.
//
//	fencelab -backend dynamodb -dynamodb-url http://127.0.0.1:8000
//	fencelab chaos -backend dynamodb -dynamodb-url http://127.0.0.1:8000 -ttl 1s -duration 10s
//
// Credentials and, without -dynamodb-url, the endpoint come from the SDK's
// default chain (AWS_ACCESS_KEY_ID, ~/.aws, ...); DynamoDB Local and
// dynalite accept any key. It lives in the DynamoDB adapter's module, so
// the root module's fencelab does not pull in the AWS SDK.
package main

import (
	"os"

	"github.com/fencekit/fencekit/internal/lab"
)

func main() { os.Exit(lab.Main(os.Args[1:])) }
