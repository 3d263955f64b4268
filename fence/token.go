package fence

import (
	"math"
	"strconv"
)

// Token is a fencing token: a number minted by a lock on every acquisition,
// greater than every token minted before it for the same lock name.
//
// The zero Token means "no token". Valid tokens are 1 through MaxToken, so
// that every token fits a signed 64-bit integer (a PostgreSQL bigint).
type Token int64

// MaxToken is the largest valid token, 2^63-1.
const MaxToken Token = math.MaxInt64

// Valid reports whether t is in the range 1..MaxToken.
func (t Token) Valid() bool { return t >= 1 }

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }
