-- permit_lib.lua: what every permit script (semaphores and read-write
-- locks) shares; scripts.go puts it in front of each of them.
--
-- KEYS, the same seven for every permit script, all in the name's hash tag:
-- KEYS[1]  counter  prefix:{name}:permit:counter  hash: last (last token
--                   minted), writer (token of the newest write permit).
--                   Never expires, never lowered.
-- KEYS[2]  held     prefix:{name}:permit:held     hash: owner -> kind:limit:token:prior
-- KEYS[3]  expiry   prefix:{name}:permit:expiry   sorted set: owner -> permit expiry, server ms
-- KEYS[4]  waiting  prefix:{name}:permit:waiting  hash: owner -> kind:limit:wake channel
-- KEYS[5]  places   prefix:{name}:permit:places   sorted set: owner -> place expiry, server ms
-- KEYS[6]  line     prefix:{name}:permit:line     sorted set: owner -> arrival number
-- KEYS[7]  writers  prefix:{name}:permit:writers  sorted set: the write places of line
--
-- kind is s (semaphore), r (read) or w (write); limit is a semaphore's
-- number of permits, 0 for a read-write lock. Keys 2 to 7 live as long as
-- the longest entry in them (each write lengthens their TTL to cover it),
-- and go when their last entry does: an idle name keeps only its counter.
-- Owners never contain NUL (driver.ValidateClaim).

if redis.REDIS_VERSION_NUM == nil and redis.replicate_commands then
  pcall(redis.replicate_commands) -- Redis 3.2 to 4: TIME before writes
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- entry splits a held or waiting value: kind, limit (a number), the rest.
local function entry(v)
  if not v then
    return nil
  end
  local k, l, rest = string.match(v, '^(%a):(%d+):(.*)$')
  return k, tonumber(l), rest
end

-- drop removes the entries of sorted set z whose expiry has passed, and
-- their values in hash h and members in the other sorted sets.
local function drop(z, h, a, b)
  local dead = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  if #dead == 0 then
    return
  end
  for i = 1, #dead, 1000 do
    local last = math.min(i + 999, #dead)
    redis.call('HDEL', h, unpack(dead, i, last))
    if a then
      redis.call('ZREM', a, unpack(dead, i, last))
      redis.call('ZREM', b, unpack(dead, i, last))
    end
  end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
end

-- purge drops every expired permit and place.
local function purge()
  drop(KEYS[3], KEYS[2])
  drop(KEYS[5], KEYS[4], KEYS[6], KEYS[7])
end

-- keep makes the keys live at least ms from now: they were written together
-- and share one TTL, read from the first.
local function keep(ms, k1, k2, k3)
  if redis.call('PTTL', k1) < ms then -- -1 (none yet) too
    redis.call('PEXPIRE', k1, ms)
    if k2 then
      redis.call('PEXPIRE', k2, ms)
    end
    if k3 then
      redis.call('PEXPIRE', k3, ms)
    end
  end
end

-- shape returns the kind and limit of a live entry (a permit first): the
-- name's shape. Call it after purge, when something is live.
local function shape()
  local o = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if o then
    return entry(redis.call('HGET', KEYS[2], o))
  end
  o = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  if o then
    return entry(redis.call('HGET', KEYS[4], o))
  end
  return nil
end

-- wake publishes "counter key NUL owner" on waiter o's channel; v is o's
-- waiting value when the caller has read it already.
local function wake(o, v)
  local _, _, ch = entry(v or redis.call('HGET', KEYS[4], o))
  if ch and ch ~= '' then
    redis.call('PUBLISH', ch, KEYS[1] .. '\0' .. o)
  end
end

-- letIn wakes the waiters that an acquire would admit now (after purge):
-- the first free-permit-many of a semaphore's line; a read-write lock's
-- first waiter when it is a writer and nothing is held, else its readers
-- ahead of the first write place while no writer holds.
local function letIn()
  local first = redis.call('ZRANGE', KEYS[6], 0, 0)[1]
  if not first then
    return
  end
  local v = redis.call('HGET', KEYS[4], first)
  local k, limit = entry(v)
  local held = redis.call('ZCARD', KEYS[3])
  if k == 's' then
    if held < limit then
      wake(first, v)
      if limit - held > 1 then
        for _, o in ipairs(redis.call('ZRANGE', KEYS[6], 1, limit - held - 1)) do
          wake(o)
        end
      end
    end
    return
  end
  if held > 0 then
    -- Readers and a writer never hold together: the first holder says
    -- whether a writer holds.
    local h = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if entry(redis.call('HGET', KEYS[2], h)) == 'w' then
      return
    end
  end
  if k == 'w' then
    if held == 0 then
      wake(first, v)
    end
    return
  end
  local w = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
  local readers
  if w[2] then
    readers = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. w[2])
  else
    readers = redis.call('ZRANGE', KEYS[6], 0, -1)
  end
  for _, o in ipairs(readers) do
    wake(o)
  end
end
