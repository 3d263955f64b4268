package lock

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
)

// MaxMetadataLen is the longest holder metadata, in bytes, that a Client
// sends and a Backend stores.
const MaxMetadataLen = 1024

// metadataKey is the context key of the holder metadata.
type metadataKey struct{}

// ContextWithMetadata returns a copy of ctx that carries md, the holder
// metadata a Backend stores with the lease that Acquire takes or renews.
//
// The metadata travels in the context, not as an argument of
// Backend.Acquire, so that the Backend interface stays as it was and a
// backend that keeps no metadata compiles and works unchanged (its Inspect
// reports ""). A Client attaches Options.Metadata this way; with
// Options.Metadata empty, metadata already in the caller's context reaches
// the backend as it is. Backend authors read it with MetadataFromContext,
// or with ValidateAcquire.
func ContextWithMetadata(ctx context.Context, md string) context.Context {
	return context.WithValue(ctx, metadataKey{}, md)
}

// MetadataFromContext returns the holder metadata ctx carries, or "".
func MetadataFromContext(ctx context.Context) string {
	md, _ := ctx.Value(metadataKey{}).(string)
	return md
}

// ValidateMetadata checks holder metadata: UTF-8 without NUL, at most
// MaxMetadataLen bytes; "" is valid and means none. Bad metadata gets an
// error matching ErrInvalid.
func ValidateMetadata(md string) error {
	switch {
	case len(md) > MaxMetadataLen:
		return fence.Invalid("metadata of %d bytes is longer than %d", len(md), MaxMetadataLen)
	case !utf8.ValidString(md):
		return fence.Invalid("metadata is not valid UTF-8")
	case strings.IndexByte(md, 0) >= 0:
		return fence.Invalid("metadata contains a NUL byte")
	}
	return nil
}

// ValidateAcquire checks the arguments of Backend.Acquire, as ValidateArgs
// does, and the holder metadata that ctx carries; it returns that metadata.
// Backends that store metadata call it first, in place of ValidateArgs.
func ValidateAcquire(ctx context.Context, name, owner string, ttl time.Duration) (string, error) {
	if err := ValidateArgs(name, owner, ttl); err != nil {
		return "", err
	}
	md := MetadataFromContext(ctx)
	if err := ValidateMetadata(md); err != nil {
		return "", err
	}
	return md, nil
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
	if len(md) > MaxMetadataLen {
		md = strings.ToValidUTF8(md[:MaxMetadataLen], "")
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
	if err := ValidateMetadata(MetadataFromContext(ctx)); err != nil {
		return nil, err
	}
	return ctx, nil
}
