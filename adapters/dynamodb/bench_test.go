package dynamodb_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// BenchmarkPut sets a fenced Store.Put beside the write a service makes
// without fencekit: a PutItem conditioned on a version attribute (optimistic
// concurrency), same table, same 256-byte value, one request each. Compare
// the two in one run (ns/op and allocs/op, on dynalite or
// FENCEKIT_DYNAMODB_URL):
//
//	go -C adapters/dynamodb test -run '^$' -bench BenchmarkPut -benchmem -count 5
func BenchmarkPut(b *testing.B) {
	srv := server(b)
	value := make([]byte, 256)
	ctx := context.Background()
	b.Run("fenced", func(b *testing.B) {
		s, err := fenceddb.NewStore(srv.Client(), testTable, &fenceddb.StoreOptions{Prefix: testkit.Namespace(b) + "/"})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := s.Put(ctx, "k", fence.Token(i+1), value); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("conditional-putitem", func(b *testing.B) {
		client := srv.Client()
		key := testkit.Namespace(b) + "/k"
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_, err := client.PutItem(ctx, &awsddb.PutItemInput{
				TableName: aws.String(testTable),
				Item: map[string]types.AttributeValue{
					fenceddb.KeyAttribute: &types.AttributeValueMemberS{Value: key},
					"ver":                 &types.AttributeValueMemberN{Value: strconv.Itoa(i + 1)},
					"val":                 &types.AttributeValueMemberB{Value: value},
				},
				ConditionExpression:       aws.String("attribute_not_exists(ver) OR ver = :prev"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":prev": &types.AttributeValueMemberN{Value: strconv.Itoa(i)}},
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
