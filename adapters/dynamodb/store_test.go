package dynamodb_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// itemsUnder counts the table's items whose partition key starts with
// prefix (a full scan: test tables are small).
func itemsUnder(t *testing.T, srv *dynalitetest.Server, prefix string) int {
	t.Helper()
	n := 0
	var start map[string]types.AttributeValue
	for {
		out, err := srv.Client().Scan(context.Background(), &awsddb.ScanInput{
			TableName:                 aws.String(testTable),
			ExclusiveStartKey:         start,
			FilterExpression:          aws.String("begins_with(#k, :p)"),
			ExpressionAttributeNames:  map[string]string{"#k": fenceddb.KeyAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: prefix}},
			ConsistentRead:            aws.Bool(true),
		})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		n += len(out.Items)
		if out.LastEvaluatedKey == nil {
			return n
		}
		start = out.LastEvaluatedKey
	}
}

func storeWithPrefix(t *testing.T, srv *dynalitetest.Server, prefix string) *fenceddb.Store {
	t.Helper()
	s, err := fenceddb.NewStore(srv.Client(), testTable, &fenceddb.StoreOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func bigValue(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// A value longer than InlineValueLen goes in chunks; replacing it, by a
// larger or a smaller value or a Delete, leaves no chunk behind, and a
// stale large Put leaves none either.
func TestLargeValuesLeaveNoChunksBehind(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	s := storeWithPrefix(t, srv, prefix)
	large := 3*fenceddb.InlineValueLen + 17

	if err := s.Put(ctx, "k", 1, bigValue('a', large)); err != nil {
		t.Fatal(err)
	}
	if got := itemsUnder(t, srv, prefix); got != 1+4 {
		t.Fatalf("after a Put of %d bytes: %d items, want the key's and 4 chunks", large, got)
	}
	if err := s.Put(ctx, "k", 2, bigValue('b', 2*fenceddb.InlineValueLen)); err != nil {
		t.Fatal(err)
	}
	if got := itemsUnder(t, srv, prefix); got != 1+2 {
		t.Fatalf("after replacing it: %d items, want the key's and 2 chunks", got)
	}
	err := s.Put(ctx, "k", 1, bigValue('c', large))
	if se := (*fence.StaleError)(nil); !errors.As(err, &se) || se.Fence != 2 {
		t.Fatalf("stale large Put: %v, want a *fence.StaleError meeting fence 2", err)
	}
	if got := itemsUnder(t, srv, prefix); got != 1+2 {
		t.Fatalf("after a stale large Put: %d items, want the key's and 2 chunks", got)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil || !bytes.Equal(rec.Value, bigValue('b', 2*fenceddb.InlineValueLen)) || rec.Fence != 2 {
		t.Fatalf("Get: fence %d, %d bytes, %v; want token 2's value", rec.Fence, len(rec.Value), err)
	}
	if err := s.Advance(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "k"); err != nil || len(rec.Value) != 2*fenceddb.InlineValueLen {
		t.Fatalf("Get after Advance: %d bytes, %v; want the value kept", len(rec.Value), err)
	}
	if err := s.Delete(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if got := itemsUnder(t, srv, prefix); got != 1 {
		t.Fatalf("after Delete: %d items, want the key's tombstone alone", got)
	}
	if err := s.Put(ctx, "k", 4, bigValue('d', large)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "k", 5, []byte("small")); err != nil {
		t.Fatal(err)
	}
	if got := itemsUnder(t, srv, prefix); got != 1 {
		t.Fatalf("after a small Put over a large value: %d items, want the key's alone", got)
	}
}

// A reader racing writers that replace a large value always gets one
// writer's whole value, never a mix or a missing chunk.
func TestLargeValueReadDuringReplacement(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	s := storeWithPrefix(t, srv, testkit.Namespace(t)+"/")
	size := 2*fenceddb.InlineValueLen + 5
	if err := s.Put(ctx, "k", 1, bigValue(1, size)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for tok := fence.Token(2); tok < 12; tok++ {
			if err := s.Put(ctx, "k", tok, bigValue(byte(tok), size)); err != nil {
				t.Errorf("Put %d: %v", tok, err)
			}
		}
		close(stop)
	}()
	reads := 0
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		rec, err := s.Get(ctx, "k")
		if err != nil {
			t.Fatalf("Get during replacement: %v", err)
		}
		if len(rec.Value) != size || !bytes.Equal(rec.Value, bigValue(rec.Value[0], size)) {
			t.Fatalf("Get returned %d bytes mixing values", len(rec.Value))
		}
		reads++
	}
	wg.Wait()
	t.Logf("%d reads during 10 replacements", reads)
}

// Bad arguments to NewStore match fence.ErrInvalid.
func TestNewStoreRefusesBadArguments(t *testing.T) {
	srv := server(t)
	for name, f := range map[string]func() error{
		"nil client":     func() error { _, err := fenceddb.NewStore(nil, testTable, nil); return err },
		"short table":    func() error { _, err := fenceddb.NewStore(srv.Client(), "ab", nil); return err },
		"table with '/'": func() error { _, err := fenceddb.NewStore(srv.Client(), "a/b/c", nil); return err },
		"NUL in prefix": func() error {
			_, err := fenceddb.NewStore(srv.Client(), testTable, &fenceddb.StoreOptions{Prefix: "a\x00"})
			return err
		},
		"prefix too long": func() error {
			_, err := fenceddb.NewStore(srv.Client(), testTable, &fenceddb.StoreOptions{Prefix: strings.Repeat("p", fenceddb.MaxPrefixLen+1)})
			return err
		},
	} {
		if err := f(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v, want fence.ErrInvalid", name, err)
		}
	}
}

// A Store on a table that does not exist says so: ErrNoTable, not a
// generic failure, and not a retryable one.
func TestMissingTable(t *testing.T) {
	srv := server(t)
	s, err := fenceddb.NewStore(srv.Client(), "fencekit_no_such_table", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if err := s.Put(ctx, "k", 1, []byte("v")); !errors.Is(err, fenceddb.ErrNoTable) {
		t.Fatalf("Put: %v, want ErrNoTable", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, fenceddb.ErrNoTable) {
		t.Fatalf("Get: %v, want ErrNoTable", err)
	}
}

// A value above MaxValueLen is refused before anything is written.
func TestValueTooLarge(t *testing.T) {
	srv := server(t)
	prefix := testkit.Namespace(t) + "/"
	s := storeWithPrefix(t, srv, prefix)
	err := s.Put(testkit.Context(t), "k", 1, make([]byte, fenceddb.MaxValueLen+1))
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Put of MaxValueLen+1 bytes: %v, want fence.ErrInvalid", err)
	}
	if got := itemsUnder(t, srv, prefix); got != 0 {
		t.Fatalf("%d items written, want none", got)
	}
}
