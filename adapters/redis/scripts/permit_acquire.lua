-- permit_acquire.lua: take a permit, extend the caller's own, or keep the
-- caller's place in line (Backend.Acquire of a permit kind, permit.go).
-- Runs after permit_lib.lua (KEYS there).
--
-- ARGV[1]  owner
-- ARGV[2]  kind: s, r or w
-- ARGV[3]  limit: a semaphore's number of permits, 0 for r and w
-- ARGV[4]  permit TTL in milliseconds
-- ARGV[5]  place TTL in milliseconds; 0: do not wait in line
-- ARGV[6]  the caller's wake-up channel (one per Backend)
--
-- Replies {1, token, prior writer} (decimal strings) when admitted or when
-- the caller already held a permit of this kind (extended, same reply);
-- {0, ms until the earliest permit expires (0: none)} when not admitted;
-- {2, kind, limit} when the name is live as another shape; {3, kind, limit}
-- when the caller holds a permit of another kind.
--
-- The token is max(last + 1, server TIME in microseconds), as acquire.lua
-- mints a lock's: HINCRBY for exact 64-bit counting, read back as a string.
local owner, kind, lim = ARGV[1], ARGV[2], ARGV[3]
local limit, ttl, place = tonumber(lim), tonumber(ARGV[4]), tonumber(ARGV[5])

purge()
local held = redis.call('ZCARD', KEYS[3])
local waiting = redis.call('ZCARD', KEYS[5])
local hk, hl -- the shape; with held > 0, the first holder's kind
if held + waiting > 0 then
  hk, hl = shape()
  if hk and ((hk == 's' or kind == 's') and (hk ~= kind or hl ~= limit)) then
    return {2, hk, hl}
  end
end

local seq = redis.call('ZSCORE', KEYS[6], owner) -- owner's arrival number
local function unplace()
  if seq then
    redis.call('ZREM', KEYS[6], owner)
    redis.call('ZREM', KEYS[5], owner)
    redis.call('ZREM', KEYS[7], owner)
    redis.call('HDEL', KEYS[4], owner)
  end
end

local mine = redis.call('HGET', KEYS[2], owner)
if mine then
  -- Live (purge ran): extend it, same token, same prior writer.
  local k, l, rest = entry(mine)
  if k ~= kind then
    return {3, k, l}
  end
  local token, prior = string.match(rest, '^(%d+):(%d+)$')
  redis.call('ZADD', KEYS[3], now + ttl, owner)
  keep(ttl, KEYS[3], KEYS[2])
  unplace()
  return {1, token, prior}
end

-- Places ahead of owner's: every live place when owner has none.
local ahead = waiting
if seq and waiting > 0 then
  ahead = redis.call('ZCOUNT', KEYS[6], '-inf', '(' .. seq)
end
local ok
if kind == 's' then
  ok = held + ahead < limit
elseif kind == 'w' then
  ok = held == 0 and ahead == 0
else
  ok = not (held > 0 and hk == 'w')
  if ok and ahead > 0 then
    -- The first write place other than owner's own.
    local w = redis.call('ZRANGE', KEYS[7], 0, 1, 'WITHSCORES')
    local ws = w[2]
    if w[1] == owner then
      ws = w[4]
    end
    if ws and (not seq or tonumber(ws) < tonumber(seq)) then
      ok = false
    end
  end
end

if ok then
  local us = t[2]
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  local token = t[1] .. us
  local clock = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- exact, below 2^53
  local c = redis.call('HMGET', KEYS[1], 'last', 'writer')
  local prior = c[2] or '0'
  -- A counter that is not a number takes the HINCRBY path, whose error says
  -- so; HINCRBY fails at 2^63-1 before anything of the permit is written.
  if c[1] and (tonumber(c[1]) or clock) >= clock then
    redis.call('HINCRBY', KEYS[1], 'last', 1)
    token = redis.call('HGET', KEYS[1], 'last')
  else
    redis.call('HSET', KEYS[1], 'last', token)
  end
  if kind == 'w' then
    redis.call('HSET', KEYS[1], 'writer', token)
  end
  redis.call('HSET', KEYS[2], owner, kind .. ':' .. lim .. ':' .. token .. ':' .. prior)
  redis.call('ZADD', KEYS[3], now + ttl, owner)
  keep(ttl, KEYS[3], KEYS[2])
  unplace()
  return {1, token, prior}
end

if place > 0 then
  -- Keep owner's place, or add one at the tail: never two for one owner.
  local was = seq
  if not seq then
    local tail = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
    seq = 1
    if tail[2] then
      seq = tonumber(tail[2]) + 1
    end
    redis.call('ZADD', KEYS[6], seq, owner)
  end
  redis.call('ZADD', KEYS[5], now + place, owner)
  redis.call('HSET', KEYS[4], owner, kind .. ':' .. lim .. ':' .. ARGV[6])
  keep(place, KEYS[5], KEYS[4], KEYS[6])
  if kind == 'w' then
    redis.call('ZADD', KEYS[7], seq, owner)
    keep(place, KEYS[7])
  elseif was then
    redis.call('ZREM', KEYS[7], owner)
  end
end

local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local wait = 0
if first[2] then
  wait = math.max(tonumber(first[2]) - now, 1)
end
return {0, wait}
