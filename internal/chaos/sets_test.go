package chaos

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
)

func TestRunSetsOnMemory(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{
		Name: "memory", Backend: memory.NewBackend(), Store: memory.NewStore(), Sets: true,
		Workers: 5, Duration: time.Second, TTL: 30 * time.Millisecond, Seed: 11,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Logf("\n%s", out.String())
	if !rep.OK() {
		t.Fatalf("violations on a fenced set run:\n%s", out.String())
	}
}
