package dynamodb

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencekit/fencekit/fence"
)

// Attribute names of a Backend's items: one item per lock name and one per
// permit name.
const (
	revAttr     = "r"  // the item's revision, a number raised by every write
	counterAttr = "c"  // the highest token minted on the name, a number
	stateAttr   = "st" // the state (state.go) as JSON, binary
)

// item is one read of a name's item.
type item struct {
	key     string
	exists  bool
	rev     int64
	counter fence.Token
	st      state
	at      time.Time // when the reply arrived, on this machine's monotonic clock
}

// errConflict means the item changed between the read and the write: the
// call reads it again.
var errConflict = errors.New("fencekit/dynamodb: the item changed since it was read")

// read reads the item key by a strongly consistent read.
func (b *Backend) read(ctx context.Context, op, key string) (item, error) {
	out, err := b.api.GetItem(ctx, &awsddb.GetItemInput{
		TableName:      aws.String(b.table),
		Key:            map[string]types.AttributeValue{KeyAttribute: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	}, quickRetries)
	if err != nil {
		return item{}, classify(op, err)
	}
	it := item{key: key, at: b.now(), exists: out.Item != nil}
	if !it.exists {
		return it, nil
	}
	it.rev, err = numberAttr(out.Item, revAttr)
	if err != nil {
		return item{}, err
	}
	c, err := numberAttr(out.Item, counterAttr)
	if err != nil {
		return item{}, err
	}
	it.counter = fence.Token(c)
	if raw, ok := out.Item[stateAttr].(*types.AttributeValueMemberB); ok {
		if err := json.Unmarshal(raw.Value, &it.st); err != nil {
			return item{}, errors.New("fencekit/dynamodb: " + op + ": the item's state is not what this package writes: " + err.Error())
		}
	}
	return it, nil
}

// write replaces the state of the item it read, if nobody wrote it since
// (its revision and counter are still it.rev and it.counter), raising its counter by minted in the
// same conditional request. It returns errConflict when somebody did.
func (b *Backend) write(ctx context.Context, op string, it item, st *state, minted int) (time.Time, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return time.Time{}, err
	}
	in := &awsddb.UpdateItemInput{
		TableName:        aws.String(b.table),
		Key:              map[string]types.AttributeValue{KeyAttribute: &types.AttributeValueMemberS{Value: it.key}},
		UpdateExpression: aws.String("SET #st = :st, #r = :nr ADD #c :m"),
		ExpressionAttributeNames: map[string]string{
			"#st": stateAttr, "#r": revAttr, "#c": counterAttr,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":st": &types.AttributeValueMemberB{Value: raw},
			":nr": &types.AttributeValueMemberN{Value: strconv.FormatInt(it.rev+1, 10)},
			":m":  &types.AttributeValueMemberN{Value: strconv.Itoa(minted)},
		},
	}
	if it.exists {
		// The counter too, though the revision changes with it: a write
		// from a state the Backend remembers (cache.go) then mints exactly
		// above the counter even on a server that lost writes and counted
		// the revision up to the same number again.
		in.ConditionExpression = aws.String("#r = :or AND #c = :oc")
		in.ExpressionAttributeValues[":or"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(it.rev, 10)}
		in.ExpressionAttributeValues[":oc"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(int64(it.counter), 10)}
	} else {
		in.ConditionExpression = aws.String("attribute_not_exists(#k)")
		in.ExpressionAttributeNames["#k"] = KeyAttribute
	}
	if _, err := b.api.UpdateItem(ctx, in, quickRetries); err != nil {
		if _, ok := conditionFailed(err); ok {
			return time.Time{}, errConflict
		}
		return time.Time{}, classify(op, err)
	}
	return b.now(), nil
}

// maxRetryBackoff caps the SDK's wait between its own retries of a
// Backend's request. The SDK's standard retryer waits up to 2 s before its
// second attempt and 4 s before its third: longer than many leases live.
// The lock Client retries a transient failure itself, within the lease's
// deadline, so the Backend keeps the SDK's attempts and cuts their waits.
const maxRetryBackoff = 50 * time.Millisecond

// quickRetries is the per-request option that caps the retry backoff.
func quickRetries(o *awsddb.Options) {
	if o.Retryer != nil {
		o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, maxRetryBackoff)
	}
}

func numberAttr(m map[string]types.AttributeValue, name string) (int64, error) {
	n, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, errors.New("fencekit/dynamodb: attribute " + name + " is not an integer: " + n.Value)
	}
	return v, nil
}
