package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

	goredis "github.com/redis/go-redis/v9"
)

// The scripts live in scripts/*.lua, embedded at build time. Every value
// reaches them through KEYS and ARGV; nothing is ever spliced into their
// source, so their SHA1 digests are constants and EVALSHA can be used.
var (
	//go:embed scripts/compare.lua
	compareLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/put.lua
	putLua string
	//go:embed scripts/delete.lua
	deleteLua string
	//go:embed scripts/advance.lua
	advanceLua string
)

var (
	acquireScript = newScript(compareLua + "\n" + acquireLua)
	extendScript  = newScript(extendLua)
	releaseScript = newScript(releaseLua)
	inspectScript = newScript(inspectLua)
	putScript     = newScript(compareLua + "\n" + putLua)
	deleteScript  = newScript(compareLua + "\n" + deleteLua)
	advanceScript = newScript(compareLua + "\n" + advanceLua)
)

// script is a Lua script and its SHA1 digest.
type script struct {
	src  string
	hash string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, hash: hex.EncodeToString(sum[:])}
}

// Whether go-redis may send a script call again after a network error.
const (
	// resend: the call is idempotent for its caller (Acquire by the same
	// owner returns the same token, Extend renews again, Inspect reads), so
	// a resend after a lost reply recovers the answer.
	resend = false
	// sendOnce: the call is a fenced write. If its reply was lost after the
	// server applied it, a resend could be refused as stale (a newer holder
	// wrote in between) and report "nothing changed" for a write that
	// landed. Sent once, the caller gets the network error instead: the
	// outcome is unknown, which is the truth.
	sendOnce = true
)

// run sends EVALSHA and, when the server answers NOSCRIPT (after SCRIPT
// FLUSH, a restart or a failover), EVAL, which also caches the script again.
// The script never ran when NOSCRIPT comes back, so the second send is safe
// even for a sendOnce call.
func (s *script) run(ctx context.Context, c Client, once bool, keys []string, args ...any) *goredis.Cmd {
	cmd := s.cmd(ctx, false, keys, args)
	_ = c.Process(ctx, wrapOnce(cmd, once))
	if !isNoScript(cmd.Err()) {
		return cmd
	}
	cmd = s.cmd(ctx, true, keys, args)
	_ = c.Process(ctx, wrapOnce(cmd, once))
	return cmd
}

// cmd builds EVALSHA (or EVAL when eval is set) for keys and args.
func (s *script) cmd(ctx context.Context, eval bool, keys []string, args []any) *goredis.Cmd {
	name, body := "evalsha", s.hash
	if eval {
		name, body = "eval", s.src
	}
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := goredis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // route by the first key on a cluster
	}
	return cmd
}

// onceCmd is a command that go-redis must not send a second time after a
// network error: go-redis consults Cmder.NoRetry before every resend, on
// single-node, cluster and ring clients alike. (It still resends a command
// that provably never reached the wire.)
type onceCmd struct{ *goredis.Cmd }

// NoRetry tells go-redis not to resend the command.
func (onceCmd) NoRetry() bool { return true }

func wrapOnce(cmd *goredis.Cmd, once bool) goredis.Cmder {
	if once {
		return onceCmd{cmd}
	}
	return cmd
}
