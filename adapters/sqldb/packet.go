package sqldb

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// ErrValueTooLarge matches the error of Store.Put on MySQL when the
// statement carrying the value would exceed the server's
// max_allowed_packet. It also matches fence.ErrInvalid: it is permanent,
// and nothing was sent or written. Raise max_allowed_packet on the
// server, or store smaller values.
var ErrValueTooLarge = errors.New("sqldb: value too large for the server's max_allowed_packet")

// packetCheckFrom is the value size from which Put compares the statement
// with max_allowed_packet: MySQL's smallest allowed setting, 1 KiB.
const packetCheckFrom = 1024

// statementSlack covers what a Put statement carries besides its text, key
// and value: the four tokens as text, _binary” quoting, the packet
// header.
const statementSlack = 256

// packetLimit caches the server's max_allowed_packet, read once.
type packetLimit struct {
	mu    sync.Mutex
	bytes int64 // 0: not read yet
}

// get returns max_allowed_packet, reading it on first use; 0 when it could
// not be read (the Put then goes ahead and meets the server's own error).
func (p *packetLimit) get(ctx context.Context, db execer) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes == 0 {
		var n int64
		if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&n); err == nil {
			p.bytes = n
		}
	}
	return p.bytes
}

// escapedLen is the length of b in a statement with the arguments
// interpolated by the driver (go-sql-driver/mysql's interpolateParams):
// each NUL, newline, CR, ^Z, quote, double quote and backslash takes two
// bytes. With server-side prepared statements the value travels as it is,
// so this is an upper bound.
func escapedLen(b []byte) int {
	n := len(b)
	for _, c := range b {
		switch c {
		case 0, '\n', '\r', 0x1a, '\'', '"', '\\':
			n++
		}
	}
	return n
}

// checkPacket refuses a MySQL Put whose statement would exceed
// max_allowed_packet. The server would close the connection on it with
// interpolateParams=true, which reads as "connection reset" and is retried
// forever.
func (s *Store) checkPacket(ctx context.Context, key string, value []byte) error {
	if s.f.d != MySQL || len(value) < packetCheckFrom || s.f.err != nil || s.db == nil {
		return nil
	}
	limit := s.packet.get(ctx, s.db)
	size := int64(len(s.f.put)+escapedLen([]byte(key))+escapedLen(value)) + statementSlack
	if limit > 0 && size > limit {
		return fmt.Errorf("%w: %w: put %q: a value of %d bytes makes a statement of up to %d bytes, over the server's max_allowed_packet of %d",
			fence.ErrInvalid, ErrValueTooLarge, key, len(value), size, limit)
	}
	return nil
}
