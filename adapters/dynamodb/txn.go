package dynamodb

import (
	"context"
	"errors"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencekit/fencekit/fence"
)

// MaxFencedItems is the most items WriteFenced writes with the fence:
// DynamoDB takes 100 actions per transaction, and the fence is one.
const MaxFencedItems = 99

// WriteFenced writes items (your own Puts, Updates, Deletes and condition
// checks, on any table) in one TransactWriteItems request together with the
// fencing rule on key: the transaction's first action raises key's fence in
// the Store to token if token is at least the fence, and DynamoDB applies
// all of the items or none. So a holder whose lease has run out, and whose
// token a newer holder has already written or advanced, changes nothing:
// WriteFenced then returns a *fence.StaleError carrying the fence it met.
// This is what Guard does for SQL, with DynamoDB's transaction.
//
// Any other cancellation of the transaction (one of your items' own
// conditions, a conflict with another transaction) is returned as the SDK
// reports it; TransactionConflict is retryable. An item must not write
// key's own item. It returns an error matching fence.ErrInvalid for a bad
// key or token, no items, or more than MaxFencedItems.
//
// dynalite, the server the tests start, has no TransactWriteItems: the
// tests of WriteFenced run only against a server that has it
// (FENCEKIT_DYNAMODB_URL), and report a skip otherwise.
func (s *Store) WriteFenced(ctx context.Context, api TransactAPI, key string, token fence.Token, items ...types.TransactWriteItem) error {
	if err := s.validate(key, token); err != nil {
		return err
	}
	if api == nil {
		return fence.Invalid("nil DynamoDB client")
	}
	if len(items) == 0 || len(items) > MaxFencedItems {
		return fence.Invalid("%d items: want 1 to %d", len(items), MaxFencedItems)
	}
	actions := make([]types.TransactWriteItem, 0, 1+len(items))
	actions = append(actions, types.TransactWriteItem{Update: &types.Update{
		TableName:                           aws.String(s.table),
		Key:                                 map[string]types.AttributeValue{KeyAttribute: s.keyAttr(key)},
		UpdateExpression:                    aws.String("SET #f = :t"),
		ConditionExpression:                 aws.String(fencingRule),
		ExpressionAttributeNames:            map[string]string{"#f": fenceAttr},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":t": number(token)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	actions = append(actions, items...)
	_, err := api.TransactWriteItems(ctx, &awsddb.TransactWriteItemsInput{TransactItems: actions})
	if err == nil {
		return nil
	}
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) && len(tc.CancellationReasons) > 0 && aws.ToString(tc.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
		return s.stale(ctx, key, token, tc.CancellationReasons[0].Item)
	}
	return classify("write fenced "+strconv.Quote(key), err)
}
