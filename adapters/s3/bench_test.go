package s3_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// BenchmarkPut compares a fenced Put with a plain PutObject of the same
// object name and size on the same server, with the SDK's default options,
// and reports HTTP requests per operation. Run it with
//
//	go test -run '^$' -bench 'Put|Get' -benchtime 200x .
func BenchmarkPut(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		value := bytes.Repeat([]byte("v"), size)
		b.Run(sizeName(size)+"/plain", func(b *testing.B) {
			client, bucket, name, c := benchTarget(b)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for b.Loop() {
				_, err := client.PutObject(context.Background(), &awss3.PutObjectInput{
					Bucket: &bucket, Key: &name, Body: bytes.NewReader(value), ContentLength: aws.Int64(int64(size)),
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.total())/float64(b.N), "requests/op")
		})
		b.Run(sizeName(size)+"/fenced", func(b *testing.B) {
			client, bucket, _, c := benchTarget(b)
			s := fences3.NewStore(client, bucket, &fences3.Options{Prefix: testkit.Namespace(b) + "/"})
			b.SetBytes(int64(size))
			b.ResetTimer()
			for b.Loop() {
				if err := s.Put(context.Background(), "k", 1, value); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.total())/float64(b.N), "requests/op")
		})
	}
}

// BenchmarkGet compares a fenced Get with a plain GetObject of a 1 KiB
// value.
func BenchmarkGet(b *testing.B) {
	value := bytes.Repeat([]byte("v"), 1<<10)
	b.Run("plain", func(b *testing.B) {
		client, bucket, name, c := benchTarget(b)
		if _, err := client.PutObject(context.Background(), &awss3.PutObjectInput{Bucket: &bucket, Key: &name, Body: bytes.NewReader(value)}); err != nil {
			b.Fatal(err)
		}
		c.total()
		b.ResetTimer()
		for b.Loop() {
			out, err := client.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: &bucket, Key: &name})
			if err != nil {
				b.Fatal(err)
			}
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(out.Body)
			_ = out.Body.Close()
		}
		b.ReportMetric(float64(c.total())/float64(b.N), "requests/op")
	})
	b.Run("fenced", func(b *testing.B) {
		client, bucket, _, c := benchTarget(b)
		s := fences3.NewStore(client, bucket, &fences3.Options{Prefix: testkit.Namespace(b) + "/"})
		if err := s.Put(context.Background(), "k", 1, value); err != nil {
			b.Fatal(err)
		}
		c.total()
		b.ResetTimer()
		for b.Loop() {
			if _, err := s.Get(context.Background(), "k"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(c.total())/float64(b.N), "requests/op")
	})
}

// benchTarget returns a counted client on the shared server, its bucket,
// and an object name of the benchmark's own.
func benchTarget(b *testing.B) (*awss3.Client, string, string, *counter) {
	srv := s3server.Shared(b)
	c := newCounter()
	client := srv.Client(func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: c} })
	return client, srv.Bucket, testkit.Namespace(b) + "/plain", c
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	c.n = map[string]int{}
	return n
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return "1MiB"
	}
	return "1KiB"
}

var _ fence.Store = (*fences3.Store)(nil)
