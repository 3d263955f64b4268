package redis

import (
	"context"
	_ "embed" // resume.lua
	"fmt"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

//go:embed scripts/resume.lua
var resumeLua string

var resumeScript = newScript(resumeLua)

// resume renews owner's live lease on name to ttl from now and returns its
// token, keeping its metadata: one script (scripts/resume.lua), one round
// trip, so that the owner check, the renewal and the token read are one
// atomic step. When owner does not hold name it returns an error matching
// driver.ErrNotHeld and changes nothing: it never re-creates a lease. A
// resend after a lost reply is safe (it returns the same token), so go-redis
// may resend it. It works on Redis Cluster: the script touches the lease key
// only.
func (b *Backend) resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if err := b.ready(ctx); err != nil {
		return 0, err
	}
	reply, err := resumeScript.run(ctx, b.client, resend, []string{b.LeaseKey(name)}, owner, millis(ttl)).Result()
	if err != nil {
		b.reload.after(err)
		return 0, opError("resume", name, err)
	}
	switch r := reply.(type) {
	case int64:
		if r == 0 {
			return 0, driver.NotHeld(name)
		}
	case string:
		t, err := strconv.ParseInt(r, 10, 64)
		if err == nil && fence.Token(t).Valid() {
			return fence.Token(t), nil
		}
	}
	return 0, fmt.Errorf("fencekit/redis: resume %q: unexpected reply %v", name, reply)
}
