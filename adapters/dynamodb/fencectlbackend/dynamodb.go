// Package fencectlbackend is fencectl's DynamoDB backend: imported for its
// init, it adds --backend dynamodb to the one fencectl binary,
// cmd/fencectl:
//
//	fencectl --dynamodb-url https://dynamodb.eu-west-1.amazonaws.com --dynamodb-region eu-west-1 --dynamodb-table jobs list
//	FENCEKIT_DYNAMODB_URL=http://127.0.0.1:8000 FENCEKIT_DYNAMODB_TABLE=jobs fencectl watch invoice/
//	fencectl --dynamodb-url http://127.0.0.1:8000 --dynamodb-table jobs --store-prefix data/ fence invoice-7/state
//
// --dynamodb-url (or FENCEKIT_DYNAMODB_URL) is the endpoint, and chooses
// the backend as the other backends' server flags do; for DynamoDB itself
// name the region's endpoint (https://dynamodb.REGION.amazonaws.com).
// --dynamodb-region (FENCEKIT_DYNAMODB_REGION, us-east-1 when neither is
// given) is the region requests are signed for. Credentials come from the
// SDK's default chain (config.LoadDefaultConfig: the AWS_* variables, the
// shared files, a role). --dynamodb-table (FENCEKIT_DYNAMODB_TABLE) names
// the table of the Backend, and is needed; --dynamodb-store-table
// (FENCEKIT_DYNAMODB_STORE_TABLE) the fenced store's, the same table when
// not given. --prefix is BackendOptions.Prefix (DefaultLockPrefix,
// "fencekit-lock/", when not given) and --store-prefix StoreOptions.Prefix
// ("" when not given: the Store's own default, a StoreOptions without a
// Prefix, so that fence looks where NewStore(client, table, nil) writes).
//
// inspect, list, fence, release --force and watch work as on the other
// backends. list, watch and bump find the Backend's items with a strongly
// consistent Scan of the table (Backend.List, PermitNames, Bump), which
// reads the whole table. bump --by N, after restoring the table, raises
// the token counter of every lock and permit name under --prefix by N
// (Backend.Bump), so that every new token on a name is above every earlier
// one (docs/operations.md, "After a restore").
//
// fencectl's Backend is new each run and has watched nothing, and a
// DynamoDB Backend never reads an expiry from a clock: inspect and list
// show an entry whose holder stopped renewing it as live, with its whole
// TTL left; watch counts the TTLs down and drops such an entry once it
// has watched it unchanged for its TTL (docs/dynamodb.md, "Expiry without
// clocks").
//
// It lives in the DynamoDB adapter's module so that the root module's
// graph never holds the AWS SDK; it has no API of its own.
package fencectlbackend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl"
)

const (
	urlFlag        = "dynamodb-url"
	urlEnv         = "FENCEKIT_DYNAMODB_URL"
	tableFlag      = "dynamodb-table"
	tableEnv       = "FENCEKIT_DYNAMODB_TABLE"
	storeTableFlag = "dynamodb-store-table"
	storeTableEnv  = "FENCEKIT_DYNAMODB_STORE_TABLE"
	regionFlag     = "dynamodb-region"
	regionEnv      = "FENCEKIT_DYNAMODB_REGION"
	// defaultRegion signs requests when neither --dynamodb-region nor its
	// variable is given (DynamoDB Local and dynalite take any region).
	defaultRegion = "us-east-1"
	// storePrefixDefault is --store-prefix's default: a Store's, whose
	// StoreOptions.Prefix is empty unless set.
	storePrefixDefault = ""
)

// probeBackoff caps the SDK's wait between its retries of the first
// request, so that an endpoint that refuses connections is reported
// within --timeout rather than after the standard retryer's seconds.
const probeBackoff = 100 * time.Millisecond

func init() {
	sp := storePrefixDefault
	fencectl.Register(fencectl.Kind{
		Name:  "dynamodb",
		Title: "DynamoDB",
		Flag:  urlFlag,
		Env:   urlEnv,
		Help:  "DynamoDB: endpoint URL, such as https://dynamodb.eu-west-1.amazonaws.com or http://127.0.0.1:8000;\ncredentials from the AWS SDK's default chain",
		Flags: []fencectl.KindFlag{
			{Name: tableFlag, Env: tableEnv, Help: "DynamoDB: table of the locks (NewBackend's table); needed"},
			{Name: storeTableFlag, Env: storeTableEnv, Help: "DynamoDB: table of the fenced store (NewStore's table); --dynamodb-table when not given"},
			{Name: regionFlag, Env: regionEnv, Help: "DynamoDB: region that requests are signed for; " + defaultRegion + " when not given"},
		},
		Prefixes:           true,
		DefaultPrefix:      fenceddb.DefaultLockPrefix,
		DefaultStorePrefix: &sp,
		Open:               openDynamoDB,
	})
}

// openDynamoDB makes a client for the endpoint o.Addr, opens the Backend
// and the Store on their tables, and checks with one GetItem that the
// endpoint answers and the table exists.
func openDynamoDB(ctx context.Context, o fencectl.Options) (*fencectl.Target, error) {
	table, storeTable, region := o.Flags[tableFlag], o.Flags[storeTableFlag], o.Flags[regionFlag]
	if table == "" {
		return nil, fence.Invalid("--backend dynamodb needs --%s or %s", tableFlag, tableEnv)
	}
	if storeTable == "" {
		storeTable = table
	}
	if region == "" {
		region = defaultRegion
	}
	u, err := url.Parse(o.Addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fence.Invalid("--%s %q: want an endpoint URL, http://host:port or https://host", urlFlag, o.Addr)
	}
	prefix, storePrefix := o.Prefix, o.StorePrefix
	if !o.PrefixSet {
		prefix = fenceddb.DefaultLockPrefix
	}
	if !o.StorePrefixSet {
		storePrefix = storePrefixDefault
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("dynamodb: load the AWS configuration: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	client := awsddb.NewFromConfig(cfg, func(opts *awsddb.Options) {
		opts.BaseEndpoint = aws.String(o.Addr)
		opts.HTTPClient = &http.Client{Transport: tr}
	})
	b, err := fenceddb.NewBackend(client, table, &fenceddb.BackendOptions{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	s, err := fenceddb.NewStore(client, storeTable, &fenceddb.StoreOptions{Prefix: storePrefix})
	if err != nil {
		return nil, err
	}
	for _, t := range uniq(table, storeTable) {
		if err := probe(ctx, client, o.Addr, t); err != nil {
			tr.CloseIdleConnections()
			return nil, err
		}
	}
	return &fencectl.Target{
		Backend:     b,
		Store:       s,
		StoreAt:     fmt.Sprintf("DynamoDB table %q, key prefix %q (--%s, --store-prefix)", storeTable, storePrefix, storeTableFlag),
		List:        b.List,
		PermitNames: b.PermitNames,
		Waiters:     b.Waiters,
		Bump: func(ctx context.Context, by int64) (fencectl.BumpResult, error) {
			r, err := b.Bump(ctx, by)
			if err != nil {
				return fencectl.BumpResult{}, err
			}
			summary := fmt.Sprintf("raised the token counters of %d items (lock and permit names under prefix %q) in table %s by %d; the highest is now %d, and every new token on a name is above every earlier one",
				r.Raised, prefix, table, by, r.MaxCounter)
			if r.Raised == 0 {
				summary = fmt.Sprintf("no lock or permit name under prefix %q in table %s: nothing was raised (are --%s and --prefix those of the applications?)", prefix, table, tableFlag)
			}
			return fencectl.BumpResult{Rows: r.Raised, MaxToken: r.MaxCounter, Summary: summary}, nil
		},
		Close: tr.CloseIdleConnections,
	}, nil
}

// probe reads one item of table that no call writes, to learn that the
// endpoint answers, the credentials are accepted and the table exists.
func probe(ctx context.Context, client *awsddb.Client, addr, table string) error {
	_, err := client.GetItem(ctx, &awsddb.GetItemInput{
		TableName: aws.String(table),
		Key:       map[string]types.AttributeValue{fenceddb.KeyAttribute: &types.AttributeValueMemberS{Value: "fencectl-probe"}},
	}, func(o *awsddb.Options) {
		if o.Retryer != nil {
			o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, probeBackoff)
		}
	})
	if err == nil {
		return nil
	}
	var rnf *types.ResourceNotFoundException
	var api smithy.APIError
	var sign *v4.SigningError
	switch {
	case errors.As(err, &rnf):
		return &noTableError{table: table, addr: addr}
	case errors.As(err, &sign):
		return fmt.Errorf("DynamoDB at %s: no AWS credentials (the SDK's default chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a role): %w", addr, err)
	case errors.As(err, &api):
		// The endpoint answered, and refused.
		return fmt.Errorf("DynamoDB at %s: %w", addr, err)
	}
	return fmt.Errorf("cannot reach DynamoDB at %s: %w", addr, err)
}

// noTableError is a table that the endpoint does not have; it matches
// fenceddb.ErrNoTable.
type noTableError struct{ table, addr string }

func (e *noTableError) Error() string {
	return fmt.Sprintf("table %q does not exist at DynamoDB %s (make it with the adapter's Migrate, or with the key schema of CreateTableInput)", e.table, e.addr)
}

func (e *noTableError) Unwrap() error { return fenceddb.ErrNoTable }

// uniq is a and, when it differs, b.
func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}
