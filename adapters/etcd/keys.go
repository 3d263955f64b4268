package etcd

import (
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// DefaultPrefix starts every key when an Options' Prefix is empty.
const DefaultPrefix = "fencekit/"

// keyEscaper %-escapes the separator and the escape character, so that a
// name is always one path segment after its kind ("lock/", "fence/", ...)
// and two different names never map to one key.
var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

func escapeKey(s string) string { return keyEscaper.Replace(s) }

// fenceWidth is the width of a stored fence: fence.MaxToken has 19 digits.
// Zero-padded to one width, decimal strings compare as bytes exactly as the
// numbers do, which is what an etcd Compare on a value does.
const fenceWidth = 19

func padFence(t fence.Token) string {
	s := strconv.FormatInt(int64(t), 10)
	return strings.Repeat("0", fenceWidth-len(s)) + s
}

func parseFence(b []byte) (fence.Token, bool) {
	if len(b) != fenceWidth {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return fence.Token(n), err == nil && fence.Token(n).Valid()
}

// Granularity is the unit in which etcd counts a lease's TTL: whole seconds.
// A Backend rounds every TTL up to it, so a lease never ends before the TTL
// its caller asked for; it may last up to one Granularity longer, more when
// the server's minimum lease TTL is longer still (see leaseSeconds), plus
// the leader's expiry sweep (every 500 ms). A conformance run of a Backend
// declares it: drivertest.Run(t, newBackend,
// drivertest.TTLGranularity(Granularity)).
const Granularity = time.Second

// leaseSeconds is ttl in whole seconds, rounded up. The server raises a TTL
// below its minimum (1.5 election timeouts, rounded up to a second: 2 s with
// etcd's defaults) to that minimum, which only lengthens the lease.
func leaseSeconds(ttl time.Duration) int64 {
	s := int64(ttl / time.Second)
	if ttl%time.Second != 0 {
		s++
	}
	return s
}
