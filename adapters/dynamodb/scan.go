package dynamodb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencekit/fencekit/fence"
)

// ScanAPI is what the Backend's operator methods (List, PermitNames and
// Bump) call besides API: they find the Backend's items by a Scan, since
// a table keyed by one partition key has no other way to list keys under
// a prefix. It is apart from API so that a client wrapper or test double
// for the lock paths needs no Scan.
//
// Those methods call Scan on the client given to NewBackend, which must
// then satisfy ScanAPI too; they return an error matching
// errors.ErrUnsupported when it does not.
//
// Types that satisfy ScanAPI: *dynamodb.Client.
type ScanAPI interface {
	Scan(ctx context.Context, in *awsddb.ScanInput, opts ...func(*awsddb.Options)) (*awsddb.ScanOutput, error)
}

var _ ScanAPI = (*awsddb.Client)(nil)

// scanner returns the Backend's client as a ScanAPI.
func (b *Backend) scanner(op string) (ScanAPI, error) {
	s, ok := b.api.(ScanAPI)
	if !ok {
		return nil, fmt.Errorf("fencekit/dynamodb: %s: the client given to NewBackend (%T) has no Scan method (ScanAPI): %w", op, b.api, errors.ErrUnsupported)
	}
	return s, nil
}

// scanPrefix calls f with every item of the table whose partition key
// starts with keyPrefix, read by a strongly consistent Scan, page by page
// (LastEvaluatedKey), with at the moment the page's reply arrived. attrs
// names the attributes to read (the key always). A Scan reads the whole
// table and filters it on the server: it costs in proportion to the
// table's size, not to the items returned.
func (b *Backend) scanPrefix(ctx context.Context, op, keyPrefix string, attrs []string, f func(m map[string]types.AttributeValue, at time.Time) error) error {
	s, err := b.scanner(op)
	if err != nil {
		return err
	}
	names := map[string]string{"#k": KeyAttribute}
	projection := "#k"
	for i, a := range attrs {
		n := fmt.Sprintf("#a%d", i)
		names[n] = a
		projection += ", " + n
	}
	in := &awsddb.ScanInput{
		TableName:                 aws.String(b.table),
		FilterExpression:          aws.String("begins_with(#k, :p)"),
		ProjectionExpression:      aws.String(projection),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: keyPrefix}},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := s.Scan(ctx, in)
		if err != nil {
			return classify(op, err)
		}
		at := b.now()
		for _, m := range out.Items {
			if err := f(m, at); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// scannedItem decodes one item of a Backend's Scan as read decodes the
// item of a GetItem: its key, revision, counter and state (those among
// them the Scan read).
func scannedItem(op string, m map[string]types.AttributeValue, at time.Time) (item, error) {
	k, ok := m[KeyAttribute].(*types.AttributeValueMemberS)
	if !ok {
		return item{}, errors.New("fencekit/dynamodb: " + op + ": an item has no string key")
	}
	it := item{key: k.Value, exists: true, at: at}
	var err error
	if it.rev, err = numberAttr(m, revAttr); err != nil {
		return item{}, err
	}
	c, err := numberAttr(m, counterAttr)
	if err != nil {
		return item{}, err
	}
	it.counter = fence.Token(c)
	if raw, ok := m[stateAttr].(*types.AttributeValueMemberB); ok {
		if err := json.Unmarshal(raw.Value, &it.st); err != nil {
			return item{}, fmt.Errorf("fencekit/dynamodb: %s: item %q: the state is not what this package writes: %v", op, it.key, err)
		}
	}
	return it, nil
}
