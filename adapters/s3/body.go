package s3

import (
	"errors"
	"io"
)

// body is the request body of a write: the header, then the caller's value,
// read in place. It is an io.ReadSeeker because the SDK reads a body more
// than once (for the SigV4 payload hash and the CRC checksum) before it
// sends it over plain HTTP; an io.MultiReader would make it buffer the body
// or refuse it. Nothing of the value is copied.
type body struct {
	parts [2][]byte
	off   int64
}

func newBody(head, value []byte) *body { return &body{parts: [2][]byte{head, value}} }

// Len is the number of bytes left to read.
func (b *body) Len() int { return int(b.size() - b.off) }

func (b *body) size() int64 { return int64(len(b.parts[0]) + len(b.parts[1])) }

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	if b.off >= b.size() {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && b.off < b.size() {
		part, off := b.parts[0], b.off
		if off >= int64(len(part)) {
			part, off = b.parts[1], off-int64(len(part))
		}
		c := copy(p[n:], part[off:])
		n += c
		b.off += int64(c)
	}
	return n, nil
}

// Seek implements io.Seeker.
func (b *body) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = b.off + offset
	case io.SeekEnd:
		abs = b.size() + offset
	default:
		return 0, errors.New("s3: body seek: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("s3: body seek: negative position")
	}
	b.off = abs
	return abs, nil
}
