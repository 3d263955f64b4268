package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/internal/lab"
	"github.com/fencekit/fencekit/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(s3server.Main(m)) }

// TestScenarios runs fencelab's scenarios, fenced ones included, with the
// store on the S3 server from s3server and the locks on memory and on
// Redis: exit code 0 means every scenario behaved as expected.
func TestScenarios(t *testing.T) {
	srv := s3server.Shared(t)
	setS3Env(t, srv)
	base := []string{"-backend", "s3", "-s3-endpoint", srv.Endpoint, "-s3-bucket", srv.Bucket}
	t.Run("LockOnMemory", func(t *testing.T) {
		if code := runMain(t, append(base, "-s3-lock", "memory")); code != 0 {
			t.Fatalf("fencelab exited %d; want 0 (every scenario as expected)", code)
		}
	})
	t.Run("LockOnRedis", func(t *testing.T) {
		url := testkit.RedisURL(t)
		if code := runMain(t, append(base, "-s3-lock", "redis", "-redis-url", url)); code != 0 {
			t.Fatalf("fencelab exited %d; want 0 (every scenario as expected)", code)
		}
	})
}

// TestChaos runs `fencelab chaos -backend s3` with the store behind the
// fault proxy (delays, cuts, lost replies) and pauses past the TTL: the
// checker finds no stale write accepted, no lost increment, and a
// linearizable history.
func TestChaos(t *testing.T) {
	srv := s3server.Shared(t)
	setS3Env(t, srv)
	// -s3-lock memory explicitly: lab.Main's flags keep their values between
	// calls in one process, and TestScenarios/LockOnRedis may have left
	// "redis" set, naming a throwaway Redis that is gone by now.
	args := []string{"chaos", "-backend", "s3", "-s3-endpoint", srv.Endpoint, "-s3-bucket", srv.Bucket,
		"-s3-lock", "memory", "-duration", "2s", "-fault-every", "100ms"}
	code, out := capture(t, args)
	for _, want := range []string{"proxy 127.0.0.1:", "no violation", "stale writes accepted (must be 0)  0", "lost increments (must be 0)        0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if code != 0 {
		t.Fatalf("fencelab chaos exited %d; want 0", code)
	}
}

// TestScenariosVerifyServer: `fencelab -backend s3` runs the store's
// VerifyServer before its scenarios: through a proxy that records the
// requests, the probe object under the run's "verify/" is created with
// If-None-Match: * and deleted again.
func TestScenariosVerifyServer(t *testing.T) {
	srv := s3server.Shared(t)
	setS3Env(t, srv)
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu               sync.Mutex
		created, deleted bool
	)
	proxy := &httputil.ReverseProxy{Director: func(r *http.Request) {
		// Only the URL changes: the Host header stays the one the client
		// signed.
		r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
		if strings.Contains(r.URL.Path, "/verify/") {
			mu.Lock()
			created = created || r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*"
			deleted = deleted || r.Method == http.MethodDelete
			mu.Unlock()
		}
	}}
	front := httptest.NewServer(proxy)
	defer front.Close()
	args := []string{"-backend", "s3", "-s3-endpoint", front.URL, "-s3-bucket", srv.Bucket, "-s3-lock", "memory"}
	if code := runMain(t, args); code != 0 {
		t.Fatalf("fencelab exited %d; want 0", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if !created || !deleted {
		t.Fatalf("probe object created %v, deleted %v; want VerifyServer's probe created and deleted", created, deleted)
	}
}

func setS3Env(t *testing.T, srv *s3server.Server) {
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
}

// capture runs lab.Main with args, its standard output captured and
// logged.
func capture(t *testing.T, args []string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = f
	code := lab.Main(args)
	os.Stdout = stdout
	out, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fencelab %s:\n%s", strings.Join(args, " "), out)
	return code, string(out)
}

// runMain runs lab.Main with args, its standard output captured into the
// test log, and checks with lab.Verdict that the output reports every
// scenario run and behaving as expected. The semaphore and read-write
// scenarios need permits; on a lock backend that answers ErrUnsupported
// for them they are skipped, and the subtest "permit scenarios" is skipped
// with lab.Verdict's reason.
func runMain(t *testing.T, args []string) int {
	t.Helper()
	code, out := capture(t, args)
	if !strings.Contains(out, "fencelab on s3") {
		t.Errorf("output lacks %q", "fencelab on s3")
	}
	skipped, err := lab.Verdict(out)
	if err != nil {
		t.Error(err)
	}
	t.Run("permit scenarios", func(t *testing.T) {
		if skipped != "" {
			t.Skip(skipped)
		}
	})
	return code
}
