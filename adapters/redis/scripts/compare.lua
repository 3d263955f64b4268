-- compare.lua: the prelude of every fencekit script that compares tokens.
--
-- Lua numbers in Redis are doubles, exact only up to 2^53, so tokens are
-- never converted with tonumber. They travel and are compared as decimal
-- strings: `greater(a, b)` is true when the non-negative decimal a is
-- numerically above b. Both must be written without leading zeros, or both
-- zero-padded to the same width (the Store's fences are 19 digits). Bytes
-- are compared one by one instead of with Lua's `<`, which uses the
-- locale's collation (strcoll).
local function greater(a, b)
  if #a ~= #b then
    return #a > #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return false
end
