package redis

import _ "embed"

// The multi-name acquire script: acquire.lua wrapped as a Lua function, so
// that each lock of a set is taken exactly as Acquire takes one, then
// multi_acquire.lua, which checks the whole set before it takes any of it.
var (
	//go:embed scripts/multi_acquire.lua
	multiAcquireLua string

	multiAcquireScript = newScript("local function acquire_one(KEYS, ARGV)\n" + acquireLua + "\nend\n" + multiAcquireLua)
)
