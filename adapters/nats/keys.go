package nats

import (
	"encoding/base64"
	"regexp"

	"github.com/fencekit/fencekit/fence"
)

// DefaultPrefix starts every key when an Options' Prefix is empty.
const DefaultPrefix = "fencekit"

// prefixPattern is what a Prefix may be: one or more KV key tokens joined by
// dots, each of the characters a KV key allows.
var prefixPattern = regexp.MustCompile(`^[-/_=A-Za-z0-9]+(\.[-/_=A-Za-z0-9]+)*$`)

func checkPrefix(p string) (string, error) {
	if p == "" {
		return DefaultPrefix, nil
	}
	if !prefixPattern.MatchString(p) {
		return "", fence.Invalid("prefix %q: want KV key tokens (letters, digits, '-', '_', '=', '/') joined by '.'", p)
	}
	return p, nil
}

// encodeName maps a lock name or a Store key, any UTF-8 string without NUL,
// to one KV key token: unpadded base64url, whose alphabet KV keys and NATS
// subjects accept as it is, and which maps different names to different
// tokens. A name of fence.MaxKeyLen bytes becomes 1366 characters.
func encodeName(s string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}
