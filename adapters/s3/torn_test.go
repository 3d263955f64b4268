package s3_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
)

// oldMetadata is a server whose HEAD and GET answer with the user metadata
// of an older version of the object next to the current version's ETag and
// body, as versitygw v1.8.0's HEAD does now and then when a PUT lands
// between its reads of the metadata and of the ETag. Here it happens on
// every request, so a store that trusts the metadata is caught each time.
type oldMetadata struct {
	*awss3.Client
	md map[string]string
}

func (o oldMetadata) HeadObject(ctx context.Context, in *awss3.HeadObjectInput, opts ...func(*awss3.Options)) (*awss3.HeadObjectOutput, error) {
	out, err := o.Client.HeadObject(ctx, in, opts...)
	if err == nil {
		out.Metadata = o.md
	}
	return out, err
}

func (o oldMetadata) GetObject(ctx context.Context, in *awss3.GetObjectInput, opts ...func(*awss3.Options)) (*awss3.GetObjectOutput, error) {
	out, err := o.Client.GetObject(ctx, in, opts...)
	if err == nil {
		out.Metadata = o.md
	}
	return out, err
}

// TestOldMetadataCannotLowerFence: with every read answering the metadata
// of the version at fence 10 and the ETag of the version at fence 20, a
// write with token 15 is stale, Get returns the value at 20, and the object
// still holds it. A store that read the fence from a HEAD's metadata would
// compare 15 with 10, send If-Match with the current ETag, and replace fence
// 20 with 15.
func TestOldMetadataCannotLowerFence(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := testkit.Context(t)
	client := srv.Client()
	prefix := testkit.Namespace(t) + "/"
	plain := fences3.NewStore(client, srv.Bucket, &fences3.Options{Prefix: prefix})
	if err := plain.Put(ctx, "k", 10, []byte("at 10")); err != nil {
		t.Fatal(err)
	}
	name := plain.ObjectName("k")
	old, err := client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Put(ctx, "k", 20, []byte("at 20")); err != nil {
		t.Fatal(err)
	}
	torn := fences3.NewStore(oldMetadata{Client: client, md: old.Metadata}, srv.Bucket, &fences3.Options{Prefix: prefix})
	for what, err := range map[string]error{
		"Put":     torn.Put(ctx, "k", 15, []byte("at 15")),
		"Delete":  torn.Delete(ctx, "k", 15),
		"Advance": torn.Advance(ctx, "k", 15),
	} {
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Fence != 20 {
			t.Errorf("%s with token 15 over fence 20 (old metadata at 10): %v; want stale at fence 20", what, err)
		}
	}
	rec, err := torn.Get(ctx, "k")
	if err != nil || string(rec.Value) != "at 20" || rec.Fence != 20 {
		t.Errorf("Get through the old metadata: %q at %d (%v); want \"at 20\" at 20", rec.Value, rec.Fence, err)
	}
	if rec, err := plain.Get(ctx, "k"); err != nil || string(rec.Value) != "at 20" || rec.Fence != 20 {
		t.Fatalf("the object now holds %q at %d (%v); want \"at 20\" at 20", rec.Value, rec.Fence, err)
	}
}
