package redis

import (
	_ "embed"

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

// Scripts run with (*goredis.Script).Run: EVALSHA first, and EVAL (which also
// caches the script again) when the server answers NOSCRIPT after a SCRIPT
// FLUSH, a restart or a failover.
var (
	acquireSrc    = compareLua + "\n" + acquireLua
	acquireScript = goredis.NewScript(acquireSrc)
	extendScript  = goredis.NewScript(extendLua)
	releaseScript = goredis.NewScript(releaseLua)
	inspectScript = goredis.NewScript(inspectLua)
	putScript     = goredis.NewScript(compareLua + "\n" + putLua)
	deleteScript  = goredis.NewScript(compareLua + "\n" + deleteLua)
	advanceScript = goredis.NewScript(compareLua + "\n" + advanceLua)
)
