-- multi_acquire.lua: take a set of locks for one owner, all or nothing.
--
-- Runs after acquire.lua wrapped as the function acquire_one(KEYS, ARGV)
-- (see multi_scripts.go), so that every lock of the set is taken, and its
-- token minted, exactly as Acquire does it.
--
-- KEYS[2i-1]  the lease hash of the i-th lock   prefix:{name}:lease
-- KEYS[2i]    its counter                      prefix:{name}:counter
-- ARGV        as acquire.lua's: owner, lease TTL in ms, counter idle expiry
--             in ms ("0": never), holder metadata
--
-- Replies, when another owner holds one of the locks, {i, pttl}: two
-- integers, the position of the first such lock and its remaining PTTL,
-- having written nothing. Otherwise it takes or extends every lock and
-- replies their tokens, as decimal strings, in the order of KEYS.
--
-- Redis runs a script without interleaving other commands, so nobody sees a
-- part of the set taken. The one failure acquire_one can raise after the
-- checks below (a counter at 2^63-1 that INCR refuses to pass) would leave
-- the locks before it taken: no lock reaches that counter in practice, and
-- the caller then releases the set (its outcome being unknown to it).

local n = #KEYS / 2
for i = 1, n do
  local owner = redis.call('HGET', KEYS[2 * i - 1], 'owner')
  if owner and owner ~= ARGV[1] then
    return {i, redis.call('PTTL', KEYS[2 * i - 1])}
  end
end
local tokens = {}
for i = 1, n do
  tokens[i] = acquire_one({KEYS[2 * i - 1], KEYS[2 * i]}, ARGV)
end
return tokens
