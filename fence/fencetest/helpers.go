package fencetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// expectValue fails unless key holds want with fence f.
func expectValue(ctx context.Context, s fence.Store, key string, want []byte, f fence.Token) error {
	rec, err := s.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("Get(%q): unexpected error %v; want value %q with fence %d", key, err, abbrev(want), f)
	}
	if !bytes.Equal(rec.Value, want) {
		return fmt.Errorf("Get(%q) = %q; want %q", key, abbrev(rec.Value), abbrev(want))
	}
	if rec.Value == nil {
		return fmt.Errorf("Get(%q) returned a nil value with a nil error; an empty value must be a non-nil empty slice", key)
	}
	if rec.Fence != f {
		return fmt.Errorf("Get(%q): fence %d; want %d", key, rec.Fence, f)
	}
	return nil
}

// expectNoValue fails unless key holds no value and its fence is f.
func expectNoValue(ctx context.Context, s fence.Store, key string, f fence.Token) error {
	rec, err := s.Get(ctx, key)
	if !errors.Is(err, fence.ErrNotFound) {
		return fmt.Errorf("Get(%q): error %v, value %q; want an error matching fence.ErrNotFound", key, err, abbrev(rec.Value))
	}
	if rec.Fence != f {
		return fmt.Errorf("Get(%q) of a key without value: Record.Fence %d; want %d", key, rec.Fence, f)
	}
	return nil
}

// expectStale fails unless err is a refusal of offered against current.
func expectStale(op string, err error, key string, offered, current fence.Token) error {
	if err == nil {
		return fmt.Errorf("%s(%q, token %d) with fence %d: accepted; want an error matching fence.ErrStale", op, key, offered, current)
	}
	if !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("%s(%q, token %d): error %v; want one matching fence.ErrStale", op, key, offered, err)
	}
	var se *fence.StaleError
	if !errors.As(err, &se) {
		return fmt.Errorf("%s(%q, token %d): error %v is not a *fence.StaleError", op, key, offered, err)
	}
	if se.Key != key || se.Token != offered || se.Fence != current {
		return fmt.Errorf("%s: StaleError{Key: %q, Token: %d, Fence: %d}; want {%q, %d, %d}", op, se.Key, se.Token, se.Fence, key, offered, current)
	}
	return nil
}

// accepted fails if err is not nil.
func accepted(op, key string, token fence.Token, err error) error {
	if err != nil {
		return fmt.Errorf("%s(%q, token %d): %v; want it accepted", op, key, token, err)
	}
	return nil
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func abbrev(b []byte) []byte {
	if len(b) > 40 {
		return append(append([]byte{}, b[:40]...), "..."...)
	}
	return b
}
