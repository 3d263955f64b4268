-- permit_inspect.lua: read a permit name's live permits, its line and its
-- last writer together, without writing. Runs after permit_lib.lua (KEYS
-- there).
--
-- Replies {last writer, live places, the first live place's value or '',
-- then per live permit: owner, kind:limit:token:prior, ms left}.
local out = {redis.call('HGET', KEYS[1], 'writer') or '0', redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf'), ''}
local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = redis.call('HGET', KEYS[2], live[i]) or ''
  out[#out + 1] = tonumber(live[i + 1]) - now
end
if #live == 0 and out[2] > 0 then
  local p = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf', 'LIMIT', 0, 1)[1]
  out[3] = redis.call('HGET', KEYS[4], p) or ''
end
return out
