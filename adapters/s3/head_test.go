package s3_test

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/internal/testkit"
)

// Parameters of TestHeadIsConsistent.
const (
	headWrites  = 300 // PUTs by the writer
	headReaders = 4   // goroutines HEADing meanwhile
)

// TestHeadIsConsistent checks the server, not the store: a HEAD must
// describe one version of the object, so that the user metadata it returns
// (where the store reads the fence) and the ETag (on which the store's
// conditional PUT is made) belong together. A writer replaces an object
// again and again, body "v<i>" with metadata n=i; readers HEAD it meanwhile
// and check that the ETag is the MD5 of "v<n>" for the n in the metadata.
//
// versitygw v1.8.0 fails it: its posix HeadObject reads the user metadata
// and the ETag as two separate extended-attribute reads by path, and a PUT
// that publishes between them makes the HEAD return the old fence with the
// new ETag. That is what made TestConformance/ConcurrentWriters fail there
// in 4 of 75 runs (docs/s3.md, "Servers tried"). So on versitygw it
// runs only when FENCEKIT_S3_PROBE=1 asks for the finding to be shown again.
func TestHeadIsConsistent(t *testing.T) {
	srv := s3server.Shared(t)
	if strings.HasPrefix(srv.Name, "versitygw") && os.Getenv("FENCEKIT_S3_PROBE") != "1" {
		t.Skip("versitygw v1.8.0's HEAD mixes two versions of an object (docs/s3.md); FENCEKIT_S3_PROBE=1 runs this on it")
	}
	ctx := testkit.Context(t)
	c := srv.Client()
	key := aws.String(testkit.Namespace(t) + "/head")
	put := func(i int) error {
		_, err := c.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(srv.Bucket), Key: key, Body: strings.NewReader(fmt.Sprintf("v%d", i)),
			Metadata: map[string]string{"n": strconv.Itoa(i)},
		})
		return err
	}
	if err := put(0); err != nil {
		t.Fatal(err)
	}
	var (
		wg          sync.WaitGroup
		stop        = make(chan struct{})
		mu          sync.Mutex
		heads, torn int
		example     string
	)
	for range headReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				out, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: key})
				if err != nil {
					t.Error(err)
					return
				}
				n := out.Metadata["n"]
				sum := md5.Sum([]byte("v" + n))
				want := hex.EncodeToString(sum[:])
				got := strings.Trim(aws.ToString(out.ETag), `"`)
				mu.Lock()
				heads++
				if got != want {
					torn++
					if example == "" {
						example = fmt.Sprintf("metadata n=%s (ETag of that body %s) with ETag %s", n, want, got)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := 1; i <= headWrites; i++ {
		if err := put(i); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%s: %d of %d HEADs returned metadata and an ETag of different versions", srv.Name, torn, heads)
	if torn > 0 {
		t.Errorf("%d of %d HEADs mixed two versions, e.g. %s", torn, heads, example)
	}
}
