package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencekit/fencekit/fence"
)

// Attribute names of a Store's items.
const (
	fenceAttr = "f" // the key's fence, a number
	valueAttr = "v" // the value, binary, absent when the key holds none
)

// MaxValueLen is the longest value a Store accepts (16 MiB).
const MaxValueLen = 16 << 20

// InlineValueLen is the longest value kept in the key's own item; a longer
// one goes in chunks of at most this size. DynamoDB's items hold at most
// 400 KB, key and attribute names included.
const InlineValueLen = 350 * 1024

// MaxPrefixLen is the longest Options.Prefix.
const MaxPrefixLen = 256

// StoreOptions configures a Store. The zero value (or nil) is valid.
type StoreOptions struct {
	// Prefix is put before every key to make the item's partition key, so
	// that stores (and a Backend) can share one table. At most
	// MaxPrefixLen bytes.
	Prefix string
}

// Store is a fence.Store on a DynamoDB table: one item per key, holding
// the fence and the value. Every write is one conditional request whose
// condition is the fencing rule, so the server compares and writes in one
// atomic step.
type Store struct {
	api    API
	table  string
	prefix string
}

var _ fence.Store = (*Store)(nil)

// NewStore returns a Store on table (made by Migrate, or with the key
// schema of CreateTableInput). It returns an error matching fence.ErrInvalid
// for a nil api, an invalid table name or a prefix that is too long.
func NewStore(api API, table string, opts *StoreOptions) (*Store, error) {
	if api == nil {
		return nil, fence.Invalid("nil DynamoDB client")
	}
	if err := validateTable(table); err != nil {
		return nil, err
	}
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	if len(o.Prefix) > MaxPrefixLen {
		return nil, fence.Invalid("prefix of %d bytes is longer than %d", len(o.Prefix), MaxPrefixLen)
	}
	if strings.IndexByte(o.Prefix, 0) >= 0 || !utf8.ValidString(o.Prefix) {
		return nil, fence.Invalid("prefix %q: want UTF-8 without NUL bytes", o.Prefix)
	}
	return &Store{api: api, table: table, prefix: o.Prefix}, nil
}

// fencingRule is the condition of every write: the key has no fence yet, or
// its fence is at most the writer's token (the same token may write again).
const fencingRule = "attribute_not_exists(#f) OR #f <= :t"

// Put writes value under key if token is at least the key's fence, and
// raises the fence to token; otherwise it returns a *fence.StaleError.
// A value longer than InlineValueLen is written as chunks first (see
// chunks.go); the write that decides is still the one conditional request
// on the key's item.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if err := s.validate(key, token); err != nil {
		return err
	}
	if len(value) > MaxValueLen {
		return fence.Invalid("value of %d bytes is longer than %d", len(value), MaxValueLen)
	}
	item := map[string]types.AttributeValue{
		KeyAttribute: s.keyAttr(key),
		fenceAttr:    number(token),
	}
	if len(value) <= InlineValueLen {
		item[valueAttr] = &types.AttributeValueMemberB{Value: encodeValue(value)}
		return s.write(ctx, "put", key, token, item)
	}
	set, err := s.writeChunks(ctx, key, value)
	if err != nil {
		return err
	}
	set.describe(item)
	if err := s.write(ctx, "put", key, token, item); err != nil {
		if errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrInvalid) {
			// Refused: nothing points at the chunks.
			s.dropChunks(set)
		}
		return err
	}
	return nil
}

// Delete removes key's value under the rule of Put, keeping the fence.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	if err := s.validate(key, token); err != nil {
		return err
	}
	item := map[string]types.AttributeValue{KeyAttribute: s.keyAttr(key), fenceAttr: number(token)}
	return s.write(ctx, "delete", key, token, item)
}

// write puts item (the key's whole new state) under the fencing rule, and
// drops the chunks of the value it replaced, if it had any.
func (s *Store) write(ctx context.Context, op, key string, token fence.Token, item map[string]types.AttributeValue) error {
	out, err := s.api.PutItem(ctx, &awsddb.PutItemInput{
		TableName:                           aws.String(s.table),
		Item:                                item,
		ConditionExpression:                 aws.String(fencingRule),
		ExpressionAttributeNames:            map[string]string{"#f": fenceAttr},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":t": number(token)},
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, sendOnce)
	if err == nil {
		if old, ok := chunksOf(s.keyAttrString(key), out.Attributes); ok {
			if now, ok := chunksOf(s.keyAttrString(key), item); !ok || now.id != old.id {
				s.dropChunks(old)
			}
		}
	}
	return s.outcome(ctx, op, key, token, err)
}

// Advance raises key's fence to token under the rule of Put, leaving the
// value as it is.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	if err := s.validate(key, token); err != nil {
		return err
	}
	_, err := s.api.UpdateItem(ctx, &awsddb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 map[string]types.AttributeValue{KeyAttribute: s.keyAttr(key)},
		UpdateExpression:                    aws.String("SET #f = :t"),
		ConditionExpression:                 aws.String(fencingRule),
		ExpressionAttributeNames:            map[string]string{"#f": fenceAttr},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":t": number(token)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, sendOnce)
	return s.outcome(ctx, "advance", key, token, err)
}

// sendOnce is the request option of every fenced write: the SDK must not
// send it again on its own. Its standard retryer resends a request whose
// reply was lost (a reset connection); had the first copy landed and a
// newer holder raised the fence before the second arrived, the second
// would be refused and the caller told ErrStale, "nothing changed", about
// a write that landed (TestLostReplyIsNotSentAgain). The error then
// leaves the outcome open, marked retryable, and the caller decides.
func sendOnce(o *awsddb.Options) { o.Retryer = aws.NopRetryer{} }

// outcome turns a write's error into the Store's: a failed condition is a
// *fence.StaleError carrying the fence the write met (stale).
func (s *Store) outcome(ctx context.Context, op, key string, token fence.Token, err error) error {
	if err == nil {
		return nil
	}
	item, ok := conditionFailed(err)
	if !ok {
		return classify(op+" "+strconv.Quote(key), err)
	}
	return s.stale(ctx, key, token, item)
}

// stale is the *fence.StaleError of a write refused by the fencing rule:
// with the fence from the item the server returned with the refusal, or,
// from a server that returns none, from a strongly consistent read of the
// fence alone (then the fence read, which is at least the one met).
func (s *Store) stale(ctx context.Context, key string, token fence.Token, item map[string]types.AttributeValue) error {
	met, found := fenceOf(item)
	if !found {
		out, err := s.api.GetItem(ctx, &awsddb.GetItemInput{
			TableName:                aws.String(s.table),
			Key:                      map[string]types.AttributeValue{KeyAttribute: s.keyAttr(key)},
			ConsistentRead:           aws.Bool(true),
			ProjectionExpression:     aws.String("#f"),
			ExpressionAttributeNames: map[string]string{"#f": fenceAttr},
		})
		if err != nil {
			return classify("read the fence of "+strconv.Quote(key), err)
		}
		met, _ = fenceOf(out.Item)
	}
	return fence.Stale(key, token, met)
}

// Get returns key's value and fence by a strongly consistent read, or an
// error matching fence.ErrNotFound (with the Record's Fence set) when the
// key holds no value.
func (s *Store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	rec, err := s.get(ctx, key)
	if err != nil {
		return fence.Record{}, err
	}
	if rec.Value == nil {
		return rec, &notFound{key: key, fence: rec.Fence}
	}
	return rec, nil
}

func (s *Store) get(ctx context.Context, key string) (fence.Record, error) {
	// A value in chunks is read after its item; a writer that replaced it
	// in between may have dropped them, and then the item is read again,
	// until a read sees one value whole or ctx ends.
	for {
		out, err := s.api.GetItem(ctx, &awsddb.GetItemInput{
			TableName:      aws.String(s.table),
			Key:            map[string]types.AttributeValue{KeyAttribute: s.keyAttr(key)},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return fence.Record{}, classify("get "+strconv.Quote(key), err)
		}
		var rec fence.Record
		rec.Fence, _ = fenceOf(out.Item)
		if b, ok := out.Item[valueAttr].(*types.AttributeValueMemberB); ok {
			rec.Value = decodeValue(b.Value)
			return rec, nil
		}
		set, ok := chunksOf(s.keyAttrString(key), out.Item)
		if !ok {
			return rec, nil
		}
		v, err := s.readChunks(ctx, set)
		if err == nil {
			rec.Value = v
			return rec, nil
		}
		if !errors.Is(err, errChunkGone) {
			return fence.Record{}, err
		}
		if err := ctx.Err(); err != nil {
			return fence.Record{}, fmt.Errorf("fencekit/dynamodb: get %q: the value was replaced during every read: %w", key, err)
		}
	}
}

func (s *Store) validate(key string, token fence.Token) error {
	return fence.ValidateWrite(key, token)
}

func (s *Store) keyAttr(key string) types.AttributeValue {
	return &types.AttributeValueMemberS{Value: s.keyAttrString(key)}
}

// keyAttrString is the partition key of key's item.
func (s *Store) keyAttrString(key string) string { return s.prefix + key }

// notFound is the error of Get for a key without a value.
type notFound struct {
	key   string
	fence fence.Token
}

func (e *notFound) Error() string {
	return "fencekit/dynamodb: key " + strconv.Quote(e.key) + " holds no value (fence " + strconv.FormatInt(int64(e.fence), 10) + ")"
}

func (e *notFound) Is(target error) bool { return target == fence.ErrNotFound }

// number is a token as a DynamoDB number.
func number(t fence.Token) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(int64(t), 10)}
}

// fenceOf reads the fence of a Store item; false when it has none.
func fenceOf(item map[string]types.AttributeValue) (fence.Token, bool) {
	n, ok := item[fenceAttr].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, false
	}
	return fence.Token(v), true
}

// A value is stored with one leading byte, so that an empty value is a
// non-empty binary (which every server accepts) and stays apart from no
// value at all.
func encodeValue(v []byte) []byte {
	b := make([]byte, 1+len(v))
	copy(b[1:], v)
	return b
}

func decodeValue(b []byte) []byte {
	if len(b) == 0 {
		return []byte{}
	}
	return append([]byte{}, b[1:]...)
}
