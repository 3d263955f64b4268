package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// KeyAttribute is the name of the partition key of every table Store and
// Backend use: a string, the fenced key or the lock name. Tables have no
// sort key.
const KeyAttribute = "k"

// CreateTableInput is the table that Migrate makes: KeyAttribute as the
// only key, billed per request. Use it to make the table with your own
// tooling (CloudFormation, Terraform: the same key schema); any billing
// mode or capacity works.
func CreateTableInput(table string) *awsddb.CreateTableInput {
	return &awsddb.CreateTableInput{
		TableName: aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(KeyAttribute), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(KeyAttribute), KeyType: types.KeyTypeHash},
		},
		BillingMode: types.BillingModePayPerRequest,
	}
}

// Migrate makes the table (CreateTableInput) unless it exists, and waits
// until it is active. A Store and a Backend may share one table: their
// items never collide (a Backend's items start with a prefix no Store key
// is given by the lock package, see Options.Prefix).
func Migrate(ctx context.Context, api TableAPI, table string) error {
	if err := validateTable(table); err != nil {
		return err
	}
	_, err := api.CreateTable(ctx, CreateTableInput(table))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("fencekit/dynamodb: create table %q: %w", table, err)
	}
	for {
		out, err := api.DescribeTable(ctx, &awsddb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("fencekit/dynamodb: describe table %q: %w", table, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
