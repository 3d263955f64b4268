-- queue.lua: take a lock when it is the caller's turn, or keep the caller's
-- place in the lock's queue. Runs after acquire.lua, which scripts.go wraps
-- as the function acquire() in front of this file, so that the token is
-- minted exactly as a plain Acquire mints it.
--
-- KEYS[1]  the lease hash   prefix:{name}:lease
-- KEYS[2]  the counter      prefix:{name}:counter
-- KEYS[3]  the queue        prefix:{name}:queue   sorted set: waiter -> arrival number
-- KEYS[4]  the places       prefix:{name}:places  sorted set: waiter -> place expiry, server ms
-- KEYS[5]  the flag         prefix:{name}:queued  "1" while a release must wake someone
-- ARGV[1..4]  as acquire.lua: owner, lease TTL ms, counter idle ms, metadata
-- ARGV[5]  place TTL in milliseconds
-- ARGV[6]  the caller's wake-up channel (one per Backend, a channel, not a key)
--
-- A waiter is the string owner .. NUL .. its wake-up channel (an owner
-- never contains NUL), so that a release knows where to send its wake-up:
-- only the waiter's own process hears it, whatever the number of waiters
-- (see wake() below, and release_wake.lua).
--
-- Replies as acquire.lua: the token (a decimal string) when the caller took
-- or holds the lock; otherwise an integer, the holder's remaining PTTL (at
-- least 1) when the caller is first in line, 0 when others are ahead of it.
--
-- A lock with waiters has the flag key, so that its release
-- (release_wake.lua) knows to wake the first of them: every enqueue while
-- the lock is held sets it, and so does a queued acquire that leaves others
-- in line. The flag lives as long as the newest place (the waiters renew it
-- with their places), and the release deletes it with the lease. (A lease
-- taken by a plain Acquire while the first waiter was on its way has none
-- until that waiter, or any other, renews.) The last waiter to be admitted
-- deletes it; one left by waiters that gave up costs the next release one
-- ZRANGE, and expires with their places.
--
-- The caller may take a free lock when nobody waits or it is first in line.
-- Places expire on the server's clock: before anyone is admitted, a first in
-- line whose place ran out is dropped with every other expired place, and
-- the new first in line is woken if the lock is free. Nobody waiting costs
-- one ZCARD in front of acquire(), and nothing else (the common path,
-- below).

-- The common path first: nobody waits (ZCARD of the missing queue, an
-- integer reply; an empty ZRANGE would build a Lua table) and the lock is
-- free or the caller's own. It returns before the rest of the script has
-- built its closures or the caller's queue entry, so that it costs
-- acquire() and the ZCARD alone.
local waiting = redis.call('ZCARD', KEYS[3])
local held -- acquire()'s reply (the holder's PTTL) when nobody waits
if waiting == 0 then
  held = acquire()
  if type(held) ~= 'number' then
    return held
  end
end

if redis.REDIS_VERSION_NUM == nil and redis.replicate_commands then
  pcall(redis.replicate_commands) -- Redis 3.2 to 4: TIME before writes
end

local me = ARGV[1] .. '\0' .. ARGV[6]

-- wake publishes "lease key NUL owner" on waiter w's channel.
local function wake(w)
  local cut = string.find(w, '\0', 1, true)
  if cut then
    redis.call('PUBLISH', string.sub(w, cut + 1), KEYS[1] .. '\0' .. string.sub(w, 1, cut - 1))
  end
end
local now -- server time in ms, read when needed
-- mark sets the flag that makes the release wake the first in line. It
-- lives as long as the places (enqueue reads their expiry: a waiter with a
-- longer place TTL than the caller's keeps it), else for the caller's place
-- TTL.
local flagTTL = ARGV[5]
local function mark()
  redis.call('SET', KEYS[5], '1', 'PX', flagTTL)
end
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

-- enqueue keeps the caller's place (adding it at the tail when it has
-- none, so a retried call never queues it twice) and renews it; both sorted
-- sets live at least as long as the newest place.
local function enqueue()
  if not redis.call('ZSCORE', KEYS[3], me) then
    local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local n = 1
    if tail[2] then
      n = tonumber(tail[2]) + 1
    end
    redis.call('ZADD', KEYS[3], n, me)
  end
  redis.call('ZADD', KEYS[4], clock() + tonumber(ARGV[5]), me)
  local ttl = redis.call('PTTL', KEYS[4])
  if ttl < tonumber(ARGV[5]) then
    redis.call('PEXPIRE', KEYS[3], ARGV[5])
    redis.call('PEXPIRE', KEYS[4], ARGV[5])
  else
    flagTTL = ttl
  end
end

if held then
  -- Held by another owner, nobody waiting: the caller is first in line.
  enqueue()
  mark()
  if held < 1 then
    held = 1
  end
  return held
end

local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if head and head ~= me then
  if tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') <= clock() then
    -- The first in line stopped renewing: drop every expired place.
    local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', clock())
    for i = 1, #dead, 1000 do
      local last = math.min(i + 999, #dead)
      redis.call('ZREM', KEYS[3], unpack(dead, i, last))
      redis.call('ZREM', KEYS[4], unpack(dead, i, last))
    end
    redis.call('ZREM', KEYS[3], head) -- even without a place entry
    waiting, head = redis.call('ZCARD', KEYS[3]), nil
    if waiting > 0 then
      head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    end
    if head and head ~= me and redis.call('EXISTS', KEYS[1]) == 0 then
      wake(head)
    end
  end
end

if head and head ~= me then
  local holder = redis.call('HGET', KEYS[1], 'owner')
  if holder == ARGV[1] then
    return acquire() -- the holder renewing through the queue: same token
  end
  enqueue()
  if holder then
    mark()
  end
  return 0
end

local r = acquire()
if type(r) == 'number' then
  -- Held by another owner; the caller is first in line (or alone).
  enqueue()
  mark()
  if r < 1 then
    r = 1
  end
  return r
end
if head then
  -- Admitted from the queue: leave it, and flag the lock if others wait;
  -- the last waiter takes the flag away (a lease that expired, rather than
  -- being released, left it).
  if redis.call('ZREM', KEYS[3], me) == 1 then
    waiting = waiting - 1
  end
  redis.call('ZREM', KEYS[4], me)
  if waiting > 0 then
    mark()
  else
    redis.call('DEL', KEYS[5])
  end
end
return r
