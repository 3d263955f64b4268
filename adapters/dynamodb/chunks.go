package dynamodb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A value longer than InlineValueLen does not fit in the key's item. Put
// first writes it as chunks, each an item of its own under a partition key
// that no key's item can have (the key's, a NUL byte, a random id, a NUL
// byte, the chunk's number: keys and prefixes never hold NUL), and then
// makes the one conditional write on the key's item, which names the
// chunks (id, count, length) instead of holding the value. The chunks are
// never changed after they are written, so the key's item alone decides
// what Get returns, and the fencing rule still lives in one request.
//
// Chunks no item names are dropped: by a Put whose write was refused, and
// by the write that replaces the item naming them (it reads the item it
// replaced, ReturnValues ALL_OLD). A process that dies between the two
// steps leaves chunks that nothing names and nothing reads.
const (
	chunkIDAttr   = "cid" // the chunks' random id, on the key's item
	chunkNAttr    = "cn"  // how many chunks
	chunkSizeAttr = "cl"  // the value's length in bytes
	chunkDataAttr = "d"   // a chunk's bytes, on a chunk's item
)

// errChunkGone means a chunk named by the item Get read no longer exists:
// a newer write replaced the value.
var errChunkGone = errors.New("fencekit/dynamodb: a chunk of the value was replaced while it was read")

// chunkSet names the chunks of one value.
type chunkSet struct {
	base string // the partition key of the key's item
	id   string
	n    int
	size int
}

func (c chunkSet) key(i int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		KeyAttribute: &types.AttributeValueMemberS{Value: c.base + "\x00" + c.id + "\x00" + strconv.Itoa(i)},
	}
}

// describe puts the attributes that name the chunks on the key's item.
func (c chunkSet) describe(item map[string]types.AttributeValue) {
	item[chunkIDAttr] = &types.AttributeValueMemberS{Value: c.id}
	item[chunkNAttr] = &types.AttributeValueMemberN{Value: strconv.Itoa(c.n)}
	item[chunkSizeAttr] = &types.AttributeValueMemberN{Value: strconv.Itoa(c.size)}
}

// chunksOf reads the chunks a key's item (partition key base) names;
// false when it names none.
func chunksOf(base string, item map[string]types.AttributeValue) (chunkSet, bool) {
	id, ok := item[chunkIDAttr].(*types.AttributeValueMemberS)
	if !ok {
		return chunkSet{}, false
	}
	n, ok1 := item[chunkNAttr].(*types.AttributeValueMemberN)
	size, ok2 := item[chunkSizeAttr].(*types.AttributeValueMemberN)
	if !ok1 || !ok2 {
		return chunkSet{}, false
	}
	cn, err1 := strconv.Atoi(n.Value)
	cs, err2 := strconv.Atoi(size.Value)
	if err1 != nil || err2 != nil || cn < 1 || cs < 0 {
		return chunkSet{}, false
	}
	return chunkSet{base: base, id: id.Value, n: cn, size: cs}, true
}

// writeChunks writes value as chunks under a new random id.
func (s *Store) writeChunks(ctx context.Context, key string, value []byte) (chunkSet, error) {
	var raw [12]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return chunkSet{}, err
	}
	set := chunkSet{base: s.keyAttrString(key), id: hex.EncodeToString(raw[:]), size: len(value)}
	set.n = (len(value) + InlineValueLen - 1) / InlineValueLen
	for i := 0; i < set.n; i++ {
		part := value[i*InlineValueLen : min((i+1)*InlineValueLen, len(value))]
		item := set.key(i)
		item[chunkDataAttr] = &types.AttributeValueMemberB{Value: part}
		if _, err := s.api.PutItem(ctx, &awsddb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
			s.dropChunks(set)
			return chunkSet{}, classify("put "+strconv.Quote(key)+": write a chunk", err)
		}
	}
	return set, nil
}

// readChunks reads a value's chunks by strongly consistent reads;
// errChunkGone when one is missing.
func (s *Store) readChunks(ctx context.Context, set chunkSet) ([]byte, error) {
	v := make([]byte, 0, set.size)
	for i := 0; i < set.n; i++ {
		out, err := s.api.GetItem(ctx, &awsddb.GetItemInput{
			TableName: aws.String(s.table), Key: set.key(i), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return nil, classify("get: read a chunk", err)
		}
		d, ok := out.Item[chunkDataAttr].(*types.AttributeValueMemberB)
		if !ok {
			return nil, errChunkGone
		}
		v = append(v, d.Value...)
	}
	if len(v) != set.size {
		return nil, errChunkGone
	}
	return v, nil
}

// dropChunks deletes the chunks of set, as far as it can: they are garbage
// whether or not it succeeds, so it has a context of its own (the caller's
// may be done), and errors are ignored.
func (s *Store) dropChunks(set chunkSet) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < set.n; i++ {
		_, _ = s.api.DeleteItem(ctx, &awsddb.DeleteItemInput{TableName: aws.String(s.table), Key: set.key(i)})
	}
}
