-- acquire.lua: take a lock and mint its token, or extend the caller's own lease.
--
-- KEYS[1]  the lease hash   prefix:{name}:lease    fields owner, token, metadata
-- KEYS[2]  the counter      prefix:{name}:counter  the last token minted
-- ARGV[1]  owner
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  counter idle expiry in milliseconds; "0": never expires
-- ARGV[4]  holder metadata (any bytes; stored as given, "" for none)
--
-- Replies the token, as a decimal string, after minting or when the owner
-- already held the lock (extended, same token); the remaining PTTL, an
-- integer, when someone else holds it. Taking or extending the lease stores
-- ARGV[4] as its metadata, replacing the owner's earlier one.
--
-- The token is next = max(counter + 1, server TIME in microseconds), so it
-- stays above every earlier token even after the counter is lost (a restart
-- without persistence, a failover to a replica that missed the last write,
-- the counter's idle expiry), as long as the server clock does not step back.
--
-- Exactness: TIME in microseconds is below 2^53 until the year 2255, so it
-- is exact as a Lua double, and a counter compares with it exactly through
-- tonumber (a counter at or above 2^53 is above it either way). A counter
-- ahead of the clock advances with INCR, exact 64-bit arithmetic inside
-- Redis, and is read back as a string: no token above 2^53 ever passes
-- through a double.
--
-- Cost: Redis runs scripts on its one thread, and every redis.call costs
-- about as much as a small command. The common path (a free lock, the clock
-- ahead of the counter) makes five: HGET of the owner, TIME, one SET that
-- writes the counter with its expiry and returns the old value (GET option,
-- Redis 7.0 and later), HSET and PEXPIRE of the lease. Lua's own work is kept
-- to operators (a C function such as string.format costs a fraction of a
-- redis.call), and the reply is a bare string, not a table.

local getset = redis.REDIS_VERSION_NUM ~= nil -- Redis 7.0 and later
if not getset and redis.replicate_commands then
  -- Redis 3.2 to 4 replicate scripts verbatim unless told to replicate their
  -- effects, and refuse writes after TIME; from 5 on this is the default.
  pcall(redis.replicate_commands)
end

local owner = redis.call('HGET', KEYS[1], 'owner')
if owner then
  if owner == ARGV[1] then
    redis.call('HSET', KEYS[1], 'metadata', ARGV[4])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return redis.call('HGET', KEYS[1], 'token')
  end
  return redis.call('PTTL', KEYS[1])
end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2] -- string arithmetic: exact, below 2^53
local us = t[2]
if #us < 6 then
  us = string.rep('0', 6 - #us) .. us
end
local token = t[1] .. us
local expires = ARGV[3] ~= '0'
local last
if getset then
  -- Move the counter to the clock, reading what it held.
  if expires then
    last = redis.call('SET', KEYS[2], token, 'PX', ARGV[3], 'GET')
  else
    last = redis.call('SET', KEYS[2], token, 'GET')
  end
else
  last = redis.call('GET', KEYS[2])
end
-- A counter that is not a number takes the INCR path, whose error says so.
if last and (tonumber(last) or now) >= now then
  -- The counter is at or ahead of the clock: count on from it. INCR keeps
  -- the expiry and fails at 2^63-1, which leaves the counter at its old
  -- value and the lease untouched.
  if getset then
    if expires then
      redis.call('SET', KEYS[2], last, 'PX', ARGV[3])
    else
      redis.call('SET', KEYS[2], last)
    end
  elseif expires then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  else
    redis.call('PERSIST', KEYS[2])
  end
  redis.call('INCR', KEYS[2])
  token = redis.call('GET', KEYS[2])
elseif not getset then
  -- The clock is ahead (or the counter is gone): jump to it.
  if expires then
    redis.call('SET', KEYS[2], token, 'PX', ARGV[3])
  else
    redis.call('SET', KEYS[2], token)
  end
end

-- No owner field means no lease hash at all: HSET creates it afresh.
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'metadata', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
