-- compare.lua: the prelude of the store scripts, which compare tokens.
--
-- `greater(a, b)` is true when the non-negative decimal a is numerically
-- above b, exactly, for decimals of up to 24 digits (tokens have at most
-- 19), with or without leading zeros. Lua numbers in Redis are doubles,
-- exact only up to 2^53, and Lua's `<` on strings goes through the C
-- library's strcoll, which depends on the server's locale; neither is used
-- alone. Instead:
--
-- 1. Both are converted with tonumber. Rounding to the nearest double never
--    reverses an order, so different doubles already decide: one call each,
--    and exact for every pair that is at least 2^11 apart (and for every
--    pair below 2^53).
-- 2. Equal doubles with different digits (only above 2^53) are split into
--    the digits above the last nine and the last nine: two numbers below
--    10^15 and 10^9, each exact as a double, compared in that order.
--
-- The scripts call it only when the two strings differ: equal strings
-- (the same token again) need no arithmetic.
local function greater(a, b)
  local x, y = tonumber(a), tonumber(b)
  if x ~= y then
    return x > y
  end
  x, y = tonumber(string.sub(a, 1, -10)) or 0, tonumber(string.sub(b, 1, -10)) or 0
  if x ~= y then
    return x > y
  end
  return tonumber(string.sub(a, -9)) > tonumber(string.sub(b, -9))
end
