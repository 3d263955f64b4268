package dynamodb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// requireTransactions skips t, saying why, unless the server has
// TransactWriteItems (dynalite has not).
func requireTransactions(t *testing.T, srv *dynalitetest.Server) {
	t.Helper()
	_, err := srv.Client().TransactWriteItems(context.Background(), &awsddb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{{ConditionCheck: &types.ConditionCheck{
			TableName:           aws.String(testTable),
			Key:                 map[string]types.AttributeValue{fenceddb.KeyAttribute: &types.AttributeValueMemberS{Value: "fencekit-probe"}},
			ConditionExpression: aws.String("attribute_not_exists(fencekit_probe)"),
		}}},
	})
	if err != nil {
		t.Skipf("WriteFenced untested here: %s answers TransactWriteItems with %v (set FENCEKIT_DYNAMODB_URL to a server that has it)", srv.Name, err)
	}
}

func userPut(table, id, v string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		fenceddb.KeyAttribute: &types.AttributeValueMemberS{Value: id},
		"v":                   &types.AttributeValueMemberS{Value: v},
	}}}
}

// WriteFenced applies the user's items with a live token, and none of
// them with a stale one (a *fence.StaleError carrying the fence met).
func TestWriteFenced(t *testing.T) {
	srv := server(t)
	requireTransactions(t, srv)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	s := storeWithPrefix(t, srv, prefix+"fence/")
	api := srv.Client()
	if err := s.WriteFenced(ctx, api, "invoice-7", 5, userPut(testTable, prefix+"invoice-7", "sent by 5")); err != nil {
		t.Fatal(err)
	}
	err := s.WriteFenced(ctx, api, "invoice-7", 4, userPut(testTable, prefix+"invoice-7", "sent by 4"))
	if se := (*fence.StaleError)(nil); !errors.As(err, &se) || se.Fence != 5 {
		t.Fatalf("stale WriteFenced: %v, want a *fence.StaleError meeting fence 5", err)
	}
	out, err := api.GetItem(ctx, &awsddb.GetItemInput{TableName: aws.String(testTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{fenceddb.KeyAttribute: &types.AttributeValueMemberS{Value: prefix + "invoice-7"}}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := out.Item["v"].(*types.AttributeValueMemberS); v == nil || v.Value != "sent by 5" {
		t.Fatalf("the user's item after a stale WriteFenced: %v, want token 5's write kept", out.Item["v"])
	}
}

// Bad arguments to WriteFenced match fence.ErrInvalid and send nothing:
// checked on any server, since nothing reaches it.
func TestWriteFencedRefusesBadArguments(t *testing.T) {
	srv := server(t)
	s := storeWithPrefix(t, srv, testkit.Namespace(t)+"/")
	ctx := testkit.Context(t)
	item := userPut(testTable, "x", "y")
	many := make([]types.TransactWriteItem, fenceddb.MaxFencedItems+1)
	for i := range many {
		many[i] = item
	}
	for name, err := range map[string]error{
		"no items":   s.WriteFenced(ctx, srv.Client(), "k", 1),
		"too many":   s.WriteFenced(ctx, srv.Client(), "k", 1, many...),
		"empty key":  s.WriteFenced(ctx, srv.Client(), "", 1, item),
		"token 0":    s.WriteFenced(ctx, srv.Client(), "k", 0, item),
		"nil client": s.WriteFenced(ctx, nil, "k", 1, item),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v, want fence.ErrInvalid", name, err)
		}
	}
}
