package fencectl

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// release --force --fence KEY on one semaphore permit raises KEY's fence
// past the evicted permit's token. The permits of one name share one token
// sequence, so a permit with a lower token is refused at KEY too, as
// docs/operations.md warns (and why --no-fence is the usual choice for
// permits); a permit with a higher token is not.
func TestPermitFenceAlsoRefusesLowerPermits(t *testing.T) {
	for name, mk := range map[string]func(*testing.T) world{"redis": redisWorld, "postgres": postgresWorld} {
		t.Run(name, func(t *testing.T) {
			w := mk(t)
			if w.migrate != nil {
				w.migrate(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run := fmt.Sprint(time.Now().UnixNano())
			pool, key := "fencepool-"+run, "fencepool-job-"+run
			sem := lock.New(w.backend, nil).Semaphore(pool, 3)
			var p [3]*lock.Lease
			for i := range p {
				l, err := sem.TryAcquire(ctx, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(context.Background())
				p[i] = l
			}
			if !(p[0].Token() < p[1].Token() && p[1].Token() < p[2].Token()) {
				t.Fatalf("permit tokens %d, %d, %d; want rising", p[0].Token(), p[1].Token(), p[2].Token())
			}
			if err := p[0].Fenced(w.store).Put(ctx, key, []byte("by the lowest permit")); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := ctl(t, w.env, w.args("release", "--force", pool, "--owner", p[1].Owner(), "--fence", key)...)
			if code != 0 {
				t.Fatalf("release --force --fence: exit %d\n%s%s", code, out, errOut)
			}
			if err := p[0].Fenced(w.store).Put(ctx, key, []byte("lowest again")); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("the permit below the evicted one wrote the fenced key: %v; want ErrStale", err)
			}
			if err := p[2].Fenced(w.store).Put(ctx, key, []byte("by the highest permit")); err != nil {
				t.Fatalf("the permit above the evicted one: %v; want its write accepted", err)
			}
		})
	}
}
