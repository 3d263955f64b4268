package fence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

func TestTokenValid(t *testing.T) {
	for tok, want := range map[fence.Token]bool{0: false, -1: false, 1: true, fence.MaxToken: true, -fence.MaxToken - 1: false} {
		if got := tok.Valid(); got != want {
			t.Errorf("Token(%d).Valid() = %v; want %v", tok, got, want)
		}
	}
	if s := fence.MaxToken.String(); s != "9223372036854775807" {
		t.Errorf("MaxToken.String() = %q", s)
	}
}

func TestStaleError(t *testing.T) {
	err := fence.Stale("invoice/7", 3, 5)
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("errors.Is(%v, ErrStale) = false", err)
	}
	if errors.Is(err, fence.ErrNotFound) || errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("a stale error must match only ErrStale")
	}
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Key != "invoice/7" || se.Token != 3 || se.Fence != 5 {
		t.Fatalf("errors.As gave %+v", se)
	}
	for _, part := range []string{"invoice/7", "3", "5"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q lacks %q", err.Error(), part)
		}
	}
}

func TestValidate(t *testing.T) {
	valid := []struct {
		key string
		tok fence.Token
	}{{"k", 1}, {"ключ", fence.MaxToken}, {strings.Repeat("x", fence.MaxKeyLen), 7}}
	for _, v := range valid {
		if err := fence.ValidateWrite(v.key, v.tok); err != nil {
			t.Errorf("ValidateWrite(%.20q, %d) = %v; want nil", v.key, v.tok, err)
		}
	}
	invalid := []struct {
		key string
		tok fence.Token
	}{{"", 1}, {"k", 0}, {"k", -5}, {"a\x00b", 1}, {"\xff", 1}, {strings.Repeat("x", fence.MaxKeyLen+1), 1}}
	for _, v := range invalid {
		err := fence.ValidateWrite(v.key, v.tok)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("ValidateWrite(%.20q, %d) = %v; want ErrInvalid", v.key, v.tok, err)
		}
	}
	if err := fence.Invalid("ttl %v", 0); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "ttl 0") {
		t.Errorf("Invalid = %v", err)
	}
}
