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

// TestVersityBinary builds versitygw (or finds it in the cache) and runs
// it. .ci/run calls it first, with a long -timeout, so that a cold build is
// not counted against the other test binaries' default timeout.
func TestVersityBinary(t *testing.T) {
	start := time.Now()
	bin, err := VersityBinary()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("versitygw %s at %s (%v)", VersityVersion, bin, time.Since(start).Round(time.Millisecond))
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(strings.ToLower(string(out)), "version") {
		t.Fatalf("versitygw --version: %v\n%s", err, out)
	}
}

// TestStartVersity starts a throwaway versitygw, round-trips an object, and
// checks that Stop ends the process and removes its directory.
func TestStartVersity(t *testing.T) {
	bin, err := VersityBinary()
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartVersity(bin)
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
		t.Fatal("versitygw still running after Stop")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s left after Stop: %v", s.dir, err)
	}
}
