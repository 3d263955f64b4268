package dynamodb

import (
	"context"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// API is the part of the DynamoDB client that Store and Backend call: the
// narrowest interface, so that a wrapper or a test double needs only these.
//
// Types that satisfy API: *dynamodb.Client of
// github.com/aws/aws-sdk-go-v2/service/dynamodb.
type API interface {
	GetItem(ctx context.Context, in *awsddb.GetItemInput, opts ...func(*awsddb.Options)) (*awsddb.GetItemOutput, error)
	PutItem(ctx context.Context, in *awsddb.PutItemInput, opts ...func(*awsddb.Options)) (*awsddb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *awsddb.UpdateItemInput, opts ...func(*awsddb.Options)) (*awsddb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *awsddb.DeleteItemInput, opts ...func(*awsddb.Options)) (*awsddb.DeleteItemOutput, error)
}

// TableAPI is what Migrate calls to make a table.
//
// Types that satisfy TableAPI: *dynamodb.Client.
type TableAPI interface {
	CreateTable(ctx context.Context, in *awsddb.CreateTableInput, opts ...func(*awsddb.Options)) (*awsddb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *awsddb.DescribeTableInput, opts ...func(*awsddb.Options)) (*awsddb.DescribeTableOutput, error)
}

// TransactAPI is what WriteFenced calls.
//
// Types that satisfy TransactAPI: *dynamodb.Client.
type TransactAPI interface {
	TransactWriteItems(ctx context.Context, in *awsddb.TransactWriteItemsInput, opts ...func(*awsddb.Options)) (*awsddb.TransactWriteItemsOutput, error)
}

var (
	_ API         = (*awsddb.Client)(nil)
	_ TableAPI    = (*awsddb.Client)(nil)
	_ TransactAPI = (*awsddb.Client)(nil)
)
