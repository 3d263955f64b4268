package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/adapters/memory"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/lab"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

var (
	s3Endpoint  = flag.String("s3-endpoint", "", "S3 endpoint URL for -backend s3 (empty: AWS S3 of the configured region)")
	s3Bucket    = flag.String("s3-bucket", "", "bucket for -backend s3; it must exist")
	s3PathStyle = flag.Bool("s3-path-style", true, "path-style requests (http://host/bucket/key), as most S3-compatible servers want")
	s3Lock      = flag.String("s3-lock", "memory", "where -backend s3 keeps its locks: memory|redis (redis uses -redis-url)")
)

// proxiedS3 puts the chaos run's fault proxy between the store's S3 client
// and the server of -s3-endpoint (the locks are not proxied).
var proxiedS3 = lab.ProxiedBackend{
	Target: func() (string, error) {
		u, err := url.Parse(*s3Endpoint)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("s3: chaos behind the fault proxy needs -s3-endpoint as a URL with a host, not %q", *s3Endpoint)
		}
		if u.Port() == "" {
			port := "80"
			if u.Scheme == "https" {
				port = "443"
			}
			return net.JoinHostPort(u.Hostname(), port), nil
		}
		return u.Host, nil
	},
	Open: func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error) {
		u, err := url.Parse(*s3Endpoint)
		if err != nil {
			return nil, nil, nil, err
		}
		u.Host = proxyAddr
		return openS3At(ctx, u.String())
	},
}

// openS3 returns a lock backend on memory or Redis and a fenced store on
// the bucket, under a prefix of this run's own.
func openS3(ctx context.Context) (driver.Backend, fence.Store, func(), error) {
	return openS3At(ctx, *s3Endpoint)
}

// openS3At is openS3 with the S3 client sent to endpoint.
func openS3At(ctx context.Context, endpoint string) (driver.Backend, fence.Store, func(), error) {
	if *s3Bucket == "" {
		return nil, nil, nil, fmt.Errorf("s3: -s3-bucket is required")
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("s3: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	client := awss3.NewFromConfig(cfg, func(o *awss3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = *s3PathStyle
	})
	if _, err := client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: s3Bucket}); err != nil {
		return nil, nil, nil, fmt.Errorf("s3: bucket %q: %w", *s3Bucket, err)
	}
	prefix := "fencelab-" + runID(ctx) + "/"
	store := fences3.NewStore(client, *s3Bucket, &fences3.Options{Prefix: prefix})
	// A server that ignores the conditional headers would make every
	// fenced scenario meaningless: refuse it before the first write.
	if err := store.VerifyServer(ctx); err != nil {
		return nil, nil, nil, fmt.Errorf("s3: %s: %w", endpointName(endpoint), err)
	}
	switch *s3Lock {
	case "memory":
		return memory.NewBackend(), store, func() {}, nil
	case "redis":
		url := flag.Lookup("redis-url").Value.String()
		opts, err := goredis.ParseURL(url)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("s3: -redis-url: %w", err)
		}
		rdb := goredis.NewClient(opts)
		if err := rdb.Ping(ctx).Err(); err != nil {
			_ = rdb.Close()
			return nil, nil, nil, fmt.Errorf("s3: locks on redis at %s: %w", opts.Addr, err)
		}
		lockPrefix := "fencelab_" + prefix[len("fencelab-"):len(prefix)-1]
		closeFn := func() {
			// The run's lock keys; the prefix is hex digits and '_', no
			// glob characters.
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			iter := rdb.Scan(dctx, 0, lockPrefix+":*", 1000).Iterator()
			for iter.Next(dctx) {
				_ = rdb.Unlink(dctx, iter.Val()).Err()
			}
			_ = rdb.Close()
		}
		return fenceredis.NewBackend(rdb, &fenceredis.BackendOptions{Prefix: lockPrefix}), store, closeFn, nil
	}
	return nil, nil, nil, fmt.Errorf("s3: -s3-lock %q: want memory or redis", *s3Lock)
}

// endpointName names the S3 endpoint for an error message.
func endpointName(endpoint string) string {
	if endpoint == "" {
		return "AWS S3"
	}
	return endpoint
}

// runID is a short random name for one run.
func runID(context.Context) string {
	o, err := lock.NewOwner()
	if err != nil {
		panic(err) // crypto/rand failing leaves nothing safe to do
	}
	return o[:12]
}
