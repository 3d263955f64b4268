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
	acquireScript = newScript(acquireLua)
	extendScript  = newScript(extendLua)
	releaseScript = newScript(releaseLua)
	inspectScript = newScript(inspectLua)
	putScript     = newScript(compareLua + "\n" + putLua)
	deleteScript  = newScript(compareLua + "\n" + deleteLua)
	advanceScript = newScript(compareLua + "\n" + advanceLua)
)

// script is a Lua script and its SHA1 digest, each also held as an
// interface value so that building a command does not box them again (one
// allocation less per call).
type script struct {
	src, hash       string
	srcArg, hashArg any
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	h := hex.EncodeToString(sum[:])
	return &script{src: src, hash: h, srcArg: src, hashArg: h}
}

// Whether go-redis may send a script call again after a network error.
const (
	// resend: a second run gives the caller the same answer the first
	// would have (Acquire by the same owner returns the same token, Inspect
	// reads), so a resend after a lost reply recovers the answer. Extend is
	// one too: a second PEXPIRE by the same owner only moves the server's
	// expiry later than the caller's local deadline assumes, which is the
	// safe side, and extend.lua never re-creates a lease that expired in
	// between (the resend then answers "not held", which is true).
	resend = false
	// sendOnce: a second run would answer differently once the first has
	// run. A fenced write resent after a newer holder wrote is refused as
	// stale and reports "nothing changed" for a write that landed; a
	// release resent after it ran answers "not held", and the caller takes
	// its own successful release for a lost lease. Sent once, the caller
	// gets the network error instead: the outcome is unknown, which is the
	// truth.
	sendOnce = true
)

// run sends EVALSHA and, when the server answers NOSCRIPT (after SCRIPT
// FLUSH, a restart or a failover), EVAL, which also caches the script again.
// The script never ran when NOSCRIPT comes back, so the second send is safe
// even for a sendOnce call. It returns by ctx's deadline (see bounded); the
// command then carries an *unknownOutcome error.
func (s *script) run(ctx context.Context, c Client, once bool, keys []string, args ...any) *goredis.Cmd {
	var sent *goredis.Cmd // written by send only; read only once send is done
	err := bounded(ctx, func() {
		cmd := s.cmd(ctx, false, keys, args)
		_ = c.Process(ctx, wrapOnce(cmd, once))
		if isNoScript(cmd.Err()) {
			cmd = s.cmd(ctx, true, keys, args)
			_ = c.Process(ctx, wrapOnce(cmd, once))
		}
		sent = cmd
	})
	if err != nil {
		abandoned := goredis.NewCmd(ctx)
		abandoned.SetErr(err)
		return abandoned
	}
	return sent
}

// cmd builds EVALSHA (or EVAL when eval is set) for keys and args.
func (s *script) cmd(ctx context.Context, eval bool, keys []string, args []any) *goredis.Cmd {
	name, body := "evalsha", s.hashArg
	if eval {
		name, body = "eval", s.srcArg
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
