// Package s3server gives the tests of adapters/s3 a real S3-compatible
// server:
//
//  1. FENCEKIT_S3_ENDPOINT (with FENCEKIT_S3_ACCESS_KEY, FENCEKIT_S3_SECRET_KEY,
//     FENCEKIT_S3_BUCKET and optionally FENCEKIT_S3_REGION) names any server;
//  2. otherwise the server FENCEKIT_S3_SERVER names is built once, cached
//     under the user cache directory, and started on a free loopback port
//     for the test binary:
//     - "versitygw" (the default): versitygw v1.8.0, a production S3
//     gateway over a directory, built with `go install` from the Go module
//     proxy, cached by version;
//     - "gofakes3": gofakes3 v1.2.0 with its in-memory backend, through
//     the small program in ../fakes3 (a module of its own, built with
//     `go build`, cached by a hash of its go.mod, go.sum and main.go), the
//     second server CI runs the tests on;
//  3. if neither works the test is skipped, or failed under
//     FENCEKIT_REQUIRE_BACKENDS=1.
//
// A test binary that uses Shared calls Main from its TestMain, so that the
// server it started is stopped and its directory removed when the tests end.
package s3server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencekit/fencekit/internal/testkit"
)

// VersityVersion is the versitygw release the tests build.
const VersityVersion = "v1.8.0"

const versityModule = "github.com/versity/versitygw/cmd/versitygw"

// Server is an S3 endpoint and a bucket on it.
type Server struct {
	// Name says what the server is, for test logs.
	Name string
	// Endpoint is the base URL, such as http://127.0.0.1:7070.
	Endpoint string
	// Region, AccessKey and SecretKey sign requests.
	Region, AccessKey, SecretKey string
	// Bucket exists on the server.
	Bucket string

	cmd  *exec.Cmd
	done chan struct{}
	dir  string
	log  string
}

// Addr is the endpoint's host:port.
func (s *Server) Addr() string {
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		return ""
	}
	if u.Port() == "" {
		if u.Scheme == "https" {
			return net.JoinHostPort(u.Hostname(), "443")
		}
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return u.Host
}

// Client returns an SDK client for the server with the SDK's default
// options except the endpoint, path-style addressing and static
// credentials; opts adjust it further.
func (s *Server) Client(opts ...func(*awss3.Options)) *awss3.Client {
	return awss3.New(awss3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	}, opts...)
}

// WithDial makes the client's connections with dial (for the fault proxy).
func WithDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(*awss3.Options) {
	return func(o *awss3.Options) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = dial
		o.HTTPClient = &http.Client{Transport: tr}
	}
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the server for this test binary: the one named by the
// environment, or one of Selected's kind started at the first call. It skips t (fails
// it under FENCEKIT_REQUIRE_BACKENDS=1) when there is none.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() { shared.srv, shared.err = open() })
	if shared.err != nil {
		testkit.Unavailable(t, "S3-compatible server", fmt.Sprintf("%v; set FENCEKIT_S3_ENDPOINT (and FENCEKIT_S3_ACCESS_KEY, FENCEKIT_S3_SECRET_KEY, FENCEKIT_S3_BUCKET), or let the test build %s (needs the go command and the Go module proxy)", shared.err, Selected()))
	}
	return shared.srv
}

// Main runs the tests and then stops the shared server, if one was started.
// Unless FENCEKIT_S3_ENDPOINT is set, it first makes sure the selected
// server's binary is built: a cold build can take minutes, and done here,
// before m.Run, it does not count against the test binary's -timeout. A
// failed build is reported by Shared, to the tests that need the server.
func Main(m *testing.M) int {
	if strings.TrimSpace(os.Getenv("FENCEKIT_S3_ENDPOINT")) == "" {
		start := time.Now()
		if _, err := Binary(Selected()); err == nil && time.Since(start) > time.Second {
			fmt.Fprintf(os.Stderr, "s3server: built %s in %v\n", Selected(), time.Since(start).Round(time.Second))
		}
	}
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	return code
}

// open connects to the environment's server or starts the selected one.
func open() (*Server, error) {
	if ep := strings.TrimSpace(os.Getenv("FENCEKIT_S3_ENDPOINT")); ep != "" {
		s := &Server{
			Name:      "FENCEKIT_S3_ENDPOINT " + ep,
			Endpoint:  ep,
			Region:    envOr("FENCEKIT_S3_REGION", "us-east-1"),
			AccessKey: os.Getenv("FENCEKIT_S3_ACCESS_KEY"),
			SecretKey: os.Getenv("FENCEKIT_S3_SECRET_KEY"),
			Bucket:    envOr("FENCEKIT_S3_BUCKET", "fencekit-test"),
		}
		return s, s.ensureBucket()
	}
	kind := Selected()
	bin, err := Binary(kind)
	if err != nil {
		return nil, err
	}
	if kind == Versity {
		return StartVersity(bin)
	}
	return StartFakeS3(bin)
}

// Kinds of server this package can build and start.
const (
	// FakeS3 is gofakes3 (FakeS3Version) with its in-memory backend.
	FakeS3 = "gofakes3"
	// Versity is versitygw (VersityVersion) with its posix backend, the
	// default: a real server, where gofakes3 is a test fake.
	Versity = "versitygw"
)

// FakeS3Version is the gofakes3 release ../fakes3 requires.
const FakeS3Version = "v1.2.0"

// Selected returns the kind of server to start: FENCEKIT_S3_SERVER, or
// Versity when it is empty. Any other value is reported by Binary.
func Selected() string {
	if v := strings.TrimSpace(os.Getenv("FENCEKIT_S3_SERVER")); v != "" {
		return v
	}
	return Versity
}

// Binary returns the path of kind's binary, building it the first time.
func Binary(kind string) (string, error) {
	switch kind {
	case FakeS3:
		return FakeS3Binary()
	case Versity:
		return VersityBinary()
	}
	return "", fmt.Errorf("FENCEKIT_S3_SERVER=%q: want %q or %q", kind, FakeS3, Versity)
}

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

// ensureBucket creates the bucket unless it exists.
func (s *Server) ensureBucket() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	if _, err := c.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(s.Bucket)}); err == nil {
		return nil
	}
	if _, err := c.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		return fmt.Errorf("create bucket %q on %s: %w", s.Bucket, s.Endpoint, err)
	}
	return nil
}

// The builds run once per test binary; the outcome, success or failure,
// is kept.
var (
	versityOnce = sync.OnceValues(versityBinary)
	fakeS3Once  = sync.OnceValues(fakeS3Binary)
)

// VersityBinary returns the path of a versitygw binary of VersityVersion,
// building it with `go install` into the user cache directory the first
// time. Concurrent test binaries wait for one build (a file lock); within
// one binary the outcome, success or failure, is kept.
func VersityBinary() (string, error) {
	return versityOnce()
}

func versityBinary() (string, error) {
	dir := "versitygw-" + VersityVersion + "-" + runtime.GOOS + "-" + runtime.GOARCH
	return cachedBinary(dir, "versitygw", func(ctx context.Context, goCmd, tmp string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, goCmd, "install", versityModule+"@"+VersityVersion)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-mod=mod", "GOWORK=off")
		return cmd
	})
}

// cachedBinary returns the path of the program name under dir in the user
// cache directory (fencekit/dir/name), building it the first time with the
// command that build gives, which must leave the program as name in tmp.
// Concurrent test binaries wait for one build (a file lock in dir).
func cachedBinary(dir, name string, build func(ctx context.Context, goCmd, tmp string) *exec.Cmd) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory for the %s binary: %w", name, err)
	}
	dir = filepath.Join(cache, "fencekit", dir)
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another test binary while we waited
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command to build %s: %w", name, err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := build(ctx, goCmd, tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s (%s): %v\n%s", name, strings.Join(cmd.Args[1:], " "), err, out)
	}
	if err := os.Rename(filepath.Join(tmp, name), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// FakeS3Binary returns the path of the ../fakes3 program, building it with
// `go build` into the user cache directory the first time, under a name
// that hashes its go.mod, go.sum and main.go (an edit builds it anew).
// Concurrent test binaries wait for one build (a file lock).
func FakeS3Binary() (string, error) {
	return fakeS3Once()
}

// fakeS3Dir is the directory of the fakes3 module, next to this file's.
func fakeS3Dir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the fakes3 module: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "fakes3"), nil
}

func fakeS3Binary() (string, error) {
	src, err := fakeS3Dir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", fmt.Errorf("fakes3 source: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	dir := "fakes3-" + hex.EncodeToString(h.Sum(nil))[:16] + "-" + runtime.GOOS + "-" + runtime.GOARCH
	return cachedBinary(dir, "fakes3", func(ctx context.Context, goCmd, tmp string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, goCmd, "build", "-o", filepath.Join(tmp, "fakes3"), ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK=off")
		return cmd
	})
}

// StartFakeS3 starts bin (from FakeS3Binary) on a free loopback port with
// one bucket, and waits until it answers.
func StartFakeS3(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "fencekit-fakes3-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{
			Name:      "gofakes3 " + FakeS3Version + " (s3mem)",
			Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
			Region:    "us-east-1",
			AccessKey: "fencekit",
			SecretKey: "fencekit-secret",
			Bucket:    "fencekit-test",
			dir:       dir,
			log:       filepath.Join(dir, "fakes3.log"),
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if lastErr = s.launch(exec.Command(bin, "-addr", addr, "-bucket", s.Bucket), port); lastErr == nil {
			if err := s.ensureBucket(); err != nil {
				s.Stop()
				return nil, err
			}
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// StartVersity starts bin as a versitygw on a free loopback port, serving a
// temporary directory with one bucket, and waits until it answers.
func StartVersity(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "fencekit-versitygw-")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{
			Name:      "versitygw " + VersityVersion + " (posix)",
			Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
			Region:    "us-east-1",
			AccessKey: "fencekit",
			SecretKey: "fencekit-secret",
			Bucket:    "fencekit-test",
			dir:       dir,
			log:       filepath.Join(dir, "versitygw.log"),
		}
		cmd := exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey,
			"--port", "127.0.0.1:"+strconv.Itoa(port), "--region", s.Region, "posix", root)
		if lastErr = s.launch(cmd, port); lastErr == nil {
			if err := s.ensureBucket(); err != nil {
				s.Stop()
				return nil, err
			}
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// launch starts cmd, the server process for port, and waits until the
// port accepts connections.
func (s *Server) launch(cmd *exec.Cmd, port int) error {
	logf, err := os.Create(s.log)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.cmd = cmd
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = sysProcAttr()
	if err := startProcess(s.cmd); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s on port %d exited at start: %s", s.Name, port, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("%s on port %d: not listening after 30s: %v\n%s", s.Name, port, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop ends a server this package started and removes its directory.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.kill()
	_ = os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// spawner starts every server from one goroutine locked to its OS thread
// for the life of the test binary: with Pdeathsig (Linux) the child is
// killed when that thread ends, which is only when the test binary ends, so
// a test binary that panics or times out leaves no server behind.
var spawner struct {
	once sync.Once
	reqs chan func()
}

func startProcess(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked
			for f := range spawner.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}
