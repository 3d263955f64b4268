package nats

import (
	"context"
	"strings"
)

// waitersBatch is how many names one Waiters request covers.
const waitersBatch = 64

// Waiters returns, for each of names in order, how many waiters stand in
// its queue now: the places under QueueKey(name) whose last message is not
// a removal. A place carries a per-key TTL, which the server enforces, so
// every place counted was renewed within its place TTL (plus the server's
// expiry sweep, about a second). The counts come from multi-last direct
// gets, up to 64 names in one request, which any replica may answer (see
// acquireInLine); a request that matches more than 1024 places fails. It
// is meant for operators (fencectl watch), not for hot paths.
func (b *Backend) Waiters(ctx context.Context, names []string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	counts := make([]int64, 0, len(names))
	for start := 0; start < len(names); start += waitersBatch {
		batch := names[start:min(start+waitersBatch, len(names))]
		subjects := make([]string, len(batch))
		index := make(map[string]int, len(batch)) // queue subject prefix → position in batch
		for i, name := range batch {
			prefix := b.b.subject + b.QueueKey(name) + "."
			subjects[i] = prefix + ">"
			index[prefix] = i
		}
		rs, _, err := b.b.lastMany(ctx, subjects)
		if err != nil {
			return nil, opError(ctx, "waiters", batch[0], err)
		}
		n := make([]int64, len(batch))
		for _, r := range rs {
			if r.rec.removed() {
				continue
			}
			// A place's subject is its queue's prefix and one more token.
			cut := strings.LastIndexByte(r.subject, '.')
			if i, ok := index[r.subject[:cut+1]]; ok {
				n[i]++
			}
		}
		counts = append(counts, n...)
	}
	return counts, nil
}
