package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/lab"
	"github.com/fencekit/fencekit/lock/driver"
)

var (
	endpoint = flag.String("dynamodb-url", "",
		"DynamoDB endpoint for -backend dynamodb, such as http://127.0.0.1:8000 (DynamoDB Local, dynalite); empty: the SDK's default for the region. The run makes a table of its own and deletes it afterwards")
	region = flag.String("dynamodb-region", "us-east-1", "AWS region for -backend dynamodb")
)

func init() {
	lab.RegisterBackend("dynamodb", func(ctx context.Context) (driver.Backend, fence.Store, func(), error) {
		return openDynamoDB(ctx, *endpoint)
	})
	lab.RegisterProxied("dynamodb", lab.ProxiedBackend{
		Target: func() (string, error) {
			u, err := url.Parse(*endpoint)
			if err != nil || u.Host == "" {
				return "", fmt.Errorf("-faults needs -dynamodb-url as http://host:port, not %q", *endpoint)
			}
			if u.Scheme != "http" {
				return "", fmt.Errorf("-faults proxies plain TCP: -dynamodb-url must be an http:// endpoint, not %q", *endpoint)
			}
			return u.Host, nil
		},
		Open: func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error) {
			return openDynamoDB(ctx, "http://"+proxyAddr)
		},
	})
}

// openDynamoDB makes a table of this run's own at endpoint and returns a
// Backend and a Store on it. The close function deletes the table.
func openDynamoDB(ctx context.Context, endpoint string) (driver.Backend, fence.Store, func(), error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(*region))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dynamodb: load the SDK's configuration: %w", err)
	}
	client := awsddb.NewFromConfig(cfg, func(o *awsddb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, nil, nil, err
	}
	table := "fencelab_" + hex.EncodeToString(id[:])
	if err := fenceddb.Migrate(ctx, client, table); err != nil {
		return nil, nil, nil, fmt.Errorf("dynamodb at %s: %w", describe(endpoint), err)
	}
	closeFn := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(dctx, &awsddb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			fmt.Fprintf(os.Stderr, "fencelab: delete table %s: %v\n", table, err)
		}
	}
	backend, err := fenceddb.NewBackend(client, table, nil)
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	store, err := fenceddb.NewStore(client, table, &fenceddb.StoreOptions{Prefix: "data/"})
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	return backend, store, closeFn, nil
}

func describe(endpoint string) string {
	if endpoint == "" {
		return "the SDK's default endpoint for " + *region
	}
	return endpoint
}
