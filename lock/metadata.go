package lock

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/fencekit/fencekit/lock/driver"
)

// metadataKey is the context key of the holder metadata.
type metadataKey struct{}

// ContextWithMetadata returns a copy of ctx that carries md, the holder
// metadata a Backend stores with the lease that Acquire takes or renews.
// With Options.Metadata empty, the metadata in the caller's context is
// what the Client sends; Options.Metadata, when set, wins. At most 1024 bytes
// of UTF-8 without NUL; longer or malformed metadata is refused with
// ErrInvalid before anything is sent.
func ContextWithMetadata(ctx context.Context, md string) context.Context {
	return context.WithValue(ctx, metadataKey{}, md)
}

// metadataFromContext returns the holder metadata ctx carries, or "".
func metadataFromContext(ctx context.Context) string {
	md, _ := ctx.Value(metadataKey{}).(string)
	return md
}

// DefaultMetadata describes this process as "host=<hostname> pid=<pid>",
// for Options.Metadata. A hostname that cannot be read is reported as "?".
func DefaultMetadata() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "?"
	}
	host = strings.ReplaceAll(strings.ToValidUTF8(host, "?"), "\x00", "?")
	md := fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
	if len(md) > driver.MaxMetadataLen {
		md = strings.ToValidUTF8(md[:driver.MaxMetadataLen], "")
	}
	return md
}

// metadataContext attaches Options.Metadata to ctx for one acquire attempt,
// and refuses bad metadata before anything is sent. With Options.Metadata
// empty, ctx goes through as it is, so metadata a caller attached with
// ContextWithMetadata reaches the backend (and is checked the same way).
func (c *Client) metadataContext(ctx context.Context) (context.Context, error) {
	if c.opts.Metadata != "" {
		ctx = ContextWithMetadata(ctx, c.opts.Metadata)
	}
	if err := driver.ValidateMetadata(metadataFromContext(ctx)); err != nil {
		return nil, err
	}
	return ctx, nil
}
