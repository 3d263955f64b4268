package dynamodb

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencekit/fencekit/fence"
)

// BumpResult is what Backend.Bump did.
type BumpResult struct {
	// Raised is the number of items whose token counter the bump raised:
	// one per lock name and per permit name that the Backend's Prefix has
	// used (a Backend never deletes its items).
	Raised int64
	// MaxCounter is the highest of the raised counters afterwards. Each
	// name has a counter of its own: every token minted on a name from
	// then on is above that name's counter, so above every token the name
	// had minted before the bump.
	MaxCounter fence.Token
}

// Bump raises the token counter of every item of the Backend (every lock
// name and permit name under its Prefix) by by, so that every token it
// mints afterwards on a name is above every token minted on that name
// before, those lost to a restore included. Run it after restoring the
// table from a backup (point-in-time recovery, or an on-demand backup),
// with every process that takes locks stopped, as docs/operations.md
// ("After a restore") says. by must exceed the number of tokens any one
// name may have minted since the restore point: every grant of a lock or
// a permit mints one.
//
// It finds the items by a strongly consistent Scan (the client given to
// NewBackend must satisfy ScanAPI), then raises each with one UpdateItem,
// ADD c :by, conditional on the item existing (one deleted meanwhile is
// skipped, not made again). The same request adds one to the item's
// revision, so that a grant read before the bump and written after it
// fails its condition and reads the raised counter. It leaves the holders
// and lines alone, and the Store's items too.
//
// A name whose item the restore lost (first used after the restore
// point) has no item to raise: its tokens start again from 1. Where its
// earlier holders wrote fences that the restore kept (a Store in another
// table), its new holders' writes are refused (fence.ErrStale) until its
// tokens pass them: the safe side, as long as those earlier holders are
// stopped.
//
// Bump refuses, with nothing changed and an error matching
// fence.ErrInvalid, a by that is not positive or that would take a counter
// past fence.MaxToken. On any other error some items may be raised and
// others not: run it again (raising a counter twice is safe).
func (b *Backend) Bump(ctx context.Context, by int64) (BumpResult, error) {
	if by <= 0 {
		return BumpResult{}, fence.Invalid("dynamodb: bump: %d is not positive", by)
	}
	type found struct {
		key     string
		counter int64
	}
	var items []found
	for _, under := range []string{b.prefix + "lock/", b.prefix + "permit/"} {
		err := b.scanPrefix(ctx, "bump", under, []string{counterAttr}, func(m map[string]types.AttributeValue, at time.Time) error {
			it, err := scannedItem("bump", m, at)
			if err != nil {
				return err
			}
			items = append(items, found{key: it.key, counter: int64(it.counter)})
			return nil
		})
		if err != nil {
			return BumpResult{}, err
		}
	}
	for _, it := range items {
		if it.counter > int64(fence.MaxToken)-by {
			return BumpResult{}, fence.Invalid("dynamodb: bump by %d: the counter of item %q, %d, would pass %d", by, it.key, it.counter, fence.MaxToken)
		}
	}
	var res BumpResult
	for _, it := range items {
		out, err := b.api.UpdateItem(ctx, &awsddb.UpdateItemInput{
			TableName:                aws.String(b.table),
			Key:                      map[string]types.AttributeValue{KeyAttribute: &types.AttributeValueMemberS{Value: it.key}},
			UpdateExpression:         aws.String("ADD #c :by, #r :one"),
			ConditionExpression:      aws.String("attribute_exists(#k)"),
			ExpressionAttributeNames: map[string]string{"#c": counterAttr, "#r": revAttr, "#k": KeyAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":by":  &types.AttributeValueMemberN{Value: strconv.FormatInt(by, 10)},
				":one": &types.AttributeValueMemberN{Value: "1"},
			},
			ReturnValues: types.ReturnValueUpdatedNew,
		})
		if _, ok := conditionFailed(err); ok {
			continue // deleted since the scan: nothing to raise
		}
		if err != nil {
			return res, classify("bump "+quote(it.key), err)
		}
		c, err := numberAttr(out.Attributes, counterAttr)
		if err != nil {
			return res, err
		}
		res.Raised++
		res.MaxCounter = max(res.MaxCounter, fence.Token(c))
	}
	return res, nil
}
