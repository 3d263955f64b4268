package redis

// HashSlot is hashSlot, for the tests of package redis_test.
var HashSlot = hashSlot
