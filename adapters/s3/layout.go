package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/fencekit/fencekit/fence"
)

// Object names. A key becomes prefix + "k/" + its escaped form while that
// form is at most maxEscaped bytes, else prefix + "h/" + the hex SHA-256 of
// the key (the key itself is then kept in the object's header, and Get
// checks it). The two namespaces cannot meet, and every name stays within
// S3's 1024-byte limit for any key fence.ValidateKey accepts (an escaped
// name that would not fit under a long prefix is hashed too).
//
// The escaping keeps only [a-z0-9_-] and writes every other byte as %XX
// with upper-case hex. Escaping '/' and '.' keeps servers that map objects
// to files (versitygw, MinIO) from seeing path components such as ".." or a
// key that is both a file ("a") and a directory ("a/b"); escaping upper-case
// letters keeps two keys that differ only by case apart on a server whose
// file system folds case. maxEscaped keeps the name one path component that
// fits a file system's 255-byte name limit.
const (
	maxEscaped = 200
	// maxName is S3's limit on an object name, in bytes.
	maxName = 1024
	// maxPrefix leaves room for "h/" and 64 hex digits.
	maxPrefix = maxName - 2 - 64
)

// objectName maps key to its object name under prefix.
func objectName(prefix, key string) string {
	const hexdigits = "0123456789ABCDEF"
	buf := make([]byte, 0, len(prefix)+2+min(maxEscaped+3, 3*len(key)))
	buf = append(buf, prefix...)
	buf = append(buf, "k/"...)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			buf = append(buf, c)
		} else {
			buf = append(buf, '%', hexdigits[c>>4], hexdigits[c&15])
		}
		if len(buf)-len(prefix)-2 > maxEscaped || len(buf) > maxName {
			sum := sha256.Sum256([]byte(key))
			return prefix + "h/" + hex.EncodeToString(sum[:])
		}
	}
	return string(buf)
}

// hashed reports whether name is a hashed object name, whose header carries
// the key.
func hashed(prefix, name string) bool {
	return len(name) > len(prefix)+1 && name[len(prefix)] == 'h'
}

// The object body starts with a fixed-width header, then the value:
//
//	fencekit1 v 0000000000000000042\n      a value at fence 42
//	fencekit1 t 0000000000000000042\n      a tombstone (or a key only advanced) at fence 42
//
// followed, for a hashed name only, by the key's length in 4 decimal digits,
// the key and "\n" (see keyHeader).
//
// The fence is in the body, not only in the metadata, because a conditional
// write compares ETags, and an ETag is computed from the body alone (its MD5
// on AWS S3 without KMS, on MinIO and on versitygw): two objects with the
// same body and different fences would have the same ETag, and an If-Match
// on it would let a stale writer through after a newer one raised the fence
// without changing the value. With the header, different states have
// different bodies and so different ETags.
const (
	headerLen    = 32
	headerMagic  = "fencekit1 "
	kindValue    = 'v'
	kindTomb     = 't'
	fenceDigits  = 19 // MaxToken, 2^63-1, has 19 decimal digits
	keyLenDigits = 4
)

// header returns the fixed header for kind and f.
func header(kind byte, f fence.Token) []byte {
	b := make([]byte, 0, headerLen)
	b = append(b, headerMagic...)
	b = append(b, kind, ' ')
	b = append(b, fenceString(f)...)
	return append(b, '\n')
}

// fenceString is f in fenceDigits zero-padded decimal digits: fixed width,
// so that it compares as text too, and exact over the whole token range.
func fenceString(f fence.Token) string {
	return fmt.Sprintf("%0*d", fenceDigits, int64(f))
}

// parseFence parses a fence written by fenceString.
func parseFence(s string) (fence.Token, error) {
	if len(s) != fenceDigits {
		return 0, fmt.Errorf("fence %q is not %d digits", s, fenceDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("fence %q is not decimal", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("fence %q out of range", s)
	}
	return fence.Token(n), nil
}

// keyHeader is the part of the header that names the key of a hashed object.
func keyHeader(key string) []byte {
	b := fmt.Appendf(nil, "%0*d", keyLenDigits, len(key))
	b = append(b, key...)
	return append(b, '\n')
}

// parsed is a decoded object body.
type parsed struct {
	kind  byte
	fence fence.Token
	value []byte // aliases the body; nil for a tombstone
}

// parseHeader decodes the header at the start of body: the kind, the
// fence, and what follows the header (after the key header of a hashed
// name, which must name key). body may be the first bytes of an object
// only (a ranged read).
func parseHeader(body []byte, withKey bool, key string) (kind byte, f fence.Token, rest []byte, err error) {
	if len(body) < headerLen || string(body[:len(headerMagic)]) != headerMagic ||
		body[len(headerMagic)+1] != ' ' || body[headerLen-1] != '\n' {
		return 0, 0, nil, fmt.Errorf("%w: object does not start with a fencekit header", ErrCorrupt)
	}
	kind = body[len(headerMagic)]
	if kind != kindValue && kind != kindTomb {
		return 0, 0, nil, fmt.Errorf("%w: unknown object kind %q", ErrCorrupt, kind)
	}
	f, err = parseFence(string(body[len(headerMagic)+2 : headerLen-1]))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	rest = body[headerLen:]
	if withKey {
		kh := keyHeader(key)
		if len(rest) < len(kh) || string(rest[:len(kh)]) != string(kh) {
			return 0, 0, nil, fmt.Errorf("%w: object's key header does not name key %q", ErrCorrupt, key)
		}
		rest = rest[len(kh):]
	}
	return kind, f, rest, nil
}

// parseBody decodes a whole object body. key is checked against the body's
// key header when the object name is hashed.
func parseBody(body []byte, withKey bool, key string) (parsed, error) {
	kind, f, rest, err := parseHeader(body, withKey, key)
	if err != nil {
		return parsed{}, err
	}
	p := parsed{kind: kind, fence: f}
	switch kind {
	case kindValue:
		p.value = rest
	case kindTomb:
		if len(rest) != 0 {
			return parsed{}, fmt.Errorf("%w: tombstone with %d bytes of value", ErrCorrupt, len(rest))
		}
	}
	return p, nil
}
