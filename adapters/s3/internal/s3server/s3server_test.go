package s3server

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestServerBinary builds the selected server (FENCEKIT_S3_SERVER, versitygw
// by default), or finds it in the cache. .ci/run calls it first, with a
// long -timeout, so that a cold build is not counted against the other test
// binaries' default timeout.
func TestServerBinary(t *testing.T) {
	start := time.Now()
	kind := Selected()
	bin, err := Binary(kind)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s at %s (%v)", kind, bin, time.Since(start).Round(time.Millisecond))
	if kind == Versity {
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(strings.ToLower(string(out)), "version") {
			t.Fatalf("versitygw --version: %v\n%s", err, out)
		}
	}
}

// TestSelectedDefaultIsVersity: with FENCEKIT_S3_SERVER unset the tests
// run on versitygw, a real server; gofakes3 only when asked for.
func TestSelectedDefaultIsVersity(t *testing.T) {
	t.Setenv("FENCEKIT_S3_SERVER", "")
	if got := Selected(); got != Versity {
		t.Fatalf("Selected() = %q with FENCEKIT_S3_SERVER empty; want %q", got, Versity)
	}
	t.Setenv("FENCEKIT_S3_SERVER", FakeS3)
	if got := Selected(); got != FakeS3 {
		t.Fatalf("Selected() = %q with FENCEKIT_S3_SERVER=%s; want it", got, FakeS3)
	}
}

// TestBinaryUnknownKind: a FENCEKIT_S3_SERVER naming no known server is an
// error that names the choices.
func TestBinaryUnknownKind(t *testing.T) {
	_, err := Binary("minio")
	if err == nil || !strings.Contains(err.Error(), FakeS3) || !strings.Contains(err.Error(), Versity) {
		t.Fatalf("Binary(\"minio\") = %v, want an error naming %q and %q", err, FakeS3, Versity)
	}
}

// TestStartServer starts a throwaway server of the selected kind,
// round-trips an object, and checks that Stop ends the process and removes
// its directory.
func TestStartServer(t *testing.T) {
	kind := Selected()
	bin, err := Binary(kind)
	if err != nil {
		t.Fatal(err)
	}
	start := StartFakeS3
	if kind == Versity {
		start = StartVersity
	}
	s, err := start(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	if _, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: &s.Bucket, Key: aws.String("a"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: &s.Bucket, Key: aws.String("a")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	_ = out.Body.Close()
	if !bytes.Equal(got, []byte("hello")) {
		t.Fatalf("got %q back", got)
	}
	s.Stop()
	select {
	case <-s.done:
	default:
		t.Fatalf("%s still running after Stop", s.Name)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s left after Stop: %v", s.dir, err)
	}
}
