package s3

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/fencekit/fencekit/fence"
)

// TestObjectNames: names are injective, also after case folding (so a
// server on a case-insensitive file system keeps keys apart), free of '/'
// and '.' after the prefix, and within S3's 1024 bytes for every key that
// fence.ValidateKey accepts, under the longest allowed prefix.
func TestObjectNames(t *testing.T) {
	keys := []string{
		"a", "A", "invoice/42", "invoice%2F42", "invoice.42", ".", "..", "../x", "a/b", "a/", "/a",
		"%41", "%4a", "J", "j", "key ", "key", "é", "e\u0301", "🔒", "~", "%7E",
		strings.Repeat("x", 200), strings.Repeat("x", 201), strings.Repeat("€", 341), strings.Repeat("é", 512),
		strings.Repeat("y", fence.MaxKeyLen), strings.Repeat("Y", fence.MaxKeyLen),
	}
	prefix := strings.Repeat("p", maxPrefix)
	seen := map[string]string{}
	for _, k := range keys {
		if err := fence.ValidateKey(k); err != nil {
			t.Fatalf("test key %q: %v", k, err)
		}
		name := objectName(prefix, k)
		if len(name) > 1024 {
			t.Errorf("key of %d bytes: name of %d bytes, over 1024", len(k), len(name))
		}
		rest := name[len(prefix)+2:]
		if strings.ContainsAny(rest, "/.") {
			t.Errorf("key %q: name %q has '/' or '.' after the prefix", k, name)
		}
		folded := strings.ToLower(name)
		if prev, dup := seen[folded]; dup {
			t.Errorf("keys %q and %q share the name %q (case folded)", prev, k, folded)
		}
		seen[folded] = k
	}
	if got := objectName("fk/", "Invoice/42.json"); got != "fk/k/%49nvoice%2F42%2Ejson" {
		t.Errorf("name of Invoice/42.json: %q", got)
	}
	if got := objectName("fk/", strings.Repeat("€", 100)); !strings.HasPrefix(got, "fk/h/") || len(got) != 5+64 {
		t.Errorf("a key whose escaped form is over %d bytes: %q; want a hashed name", maxEscaped, got)
	}
}

// TestBodyRoundTrip: body reads the header and the value in order, in any
// read sizes, and rereads after a seek, as the SDK does.
func TestBodyRoundTrip(t *testing.T) {
	head, value := header(kindValue, 42), []byte("the value")
	want := append(append([]byte{}, head...), value...)
	b := newBody(head, value)
	if err := iotest.TestReader(b, want); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after a seek: %q, %v", got, err)
	}
	if _, err := b.Seek(-1, io.SeekStart); err == nil {
		t.Error("seek to -1 accepted")
	}
}

// TestHeaderParse: the fence survives the header exactly over the whole
// token range, and malformed bodies are ErrCorrupt.
func TestHeaderParse(t *testing.T) {
	for _, f := range []fence.Token{1, 9, 10, 1 << 53, 1<<53 + 1, fence.MaxToken - 1, fence.MaxToken} {
		p, err := parseBody(header(kindTomb, f), false, "k")
		if err != nil || p.fence != f || p.kind != kindTomb {
			t.Errorf("fence %d: got %d %q %v", f, p.fence, p.kind, err)
		}
		if len(header(kindValue, f)) != headerLen {
			t.Errorf("fence %d: header of %d bytes, want %d", f, len(header(kindValue, f)), headerLen)
		}
	}
	withKey := append(header(kindValue, 7), keyHeader("key")...)
	withKey = append(withKey, "v"...)
	if p, err := parseBody(withKey, true, "key"); err != nil || string(p.value) != "v" {
		t.Errorf("hashed body: %q %v", p.value, err)
	}
	for what, body := range map[string][]byte{
		"empty":                  nil,
		"no magic":               []byte(strings.Repeat("x", 40)),
		"short fence":            []byte("fencekit1 v 12345\n"),
		"letters in the fence":   []byte("fencekit1 v 00000000000000000a1\n"),
		"unknown kind":           header('x', 1),
		"a tombstone with bytes": append(header(kindTomb, 1), 'x'),
		"another key's header":   append(header(kindValue, 7), keyHeader("other")...),
	} {
		if _, err := parseBody(body, what == "another key's header", "key"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", what, err)
		}
	}
}
