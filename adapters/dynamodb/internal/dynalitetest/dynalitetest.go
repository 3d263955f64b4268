// Package dynalitetest gives the tests of adapters/dynamodb a real server of
// the DynamoDB API:
//
//  1. FENCEKIT_DYNAMODB_URL names any endpoint (DynamoDB itself, DynamoDB
//     Local, LocalStack), signed with the SDK's default credential chain
//     and FENCEKIT_DYNAMODB_REGION (us-east-1 when unset);
//  2. otherwise dynalite (Version, an implementation of the DynamoDB API
//     in Node.js, in memory) is installed once with `npm ci` from the
//     package-lock.json kept next to this file into the user cache
//     directory, and started on a free loopback port for the test binary;
//  3. if neither works the test is skipped, or failed under
//     FENCEKIT_REQUIRE_BACKENDS=1.
//
// A test binary that uses Shared calls Main from its TestMain, so that the
// server it started is stopped when the tests end.
package dynalitetest

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencekit/fencekit/internal/servers"
	"github.com/fencekit/fencekit/internal/testkit"
)

// Version is the dynalite release the tests install (pinned, with its
// dependencies, by npm/package-lock.json).
const Version = "4.0.0"

// URLEnv names an environment variable with the endpoint of a server to use
// instead of dynalite.
const URLEnv = "FENCEKIT_DYNAMODB_URL"

//go:embed npm/package.json npm/package-lock.json npm/serve.js
var npmFiles embed.FS

// Server is a DynamoDB endpoint.
type Server struct {
	// Name says what the server is, for test logs.
	Name string
	// Endpoint is the base URL, such as http://127.0.0.1:4567.
	Endpoint string
	// Dynalite is true for the server this package started: it has no
	// TransactWriteItems and no ReturnValuesOnConditionCheckFailure.
	Dynalite bool

	region string
	args   []string // the command line of node, to restart it
	onDisk bool     // the tables are in a LevelDB store (StartOnDisk)
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
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
// options except the endpoint, the region and, for dynalite, static
// credentials; opts adjust it further.
func (s *Server) Client(opts ...func(*awsddb.Options)) *awsddb.Client {
	o := awsddb.Options{Region: s.region, BaseEndpoint: aws.String(s.Endpoint)}
	if s.Dynalite {
		o.Credentials = credentials.NewStaticCredentialsProvider("fencekit", "fencekit-secret", "")
	} else {
		cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion(s.region))
		if err == nil {
			o.Credentials = cfg.Credentials
		}
	}
	return awsddb.New(o, opts...)
}

// WithDial makes the client's connections with dial (for the fault proxy).
func WithDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(*awsddb.Options) {
	return func(o *awsddb.Options) {
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

// Shared returns the server for this test binary: the one named by
// FENCEKIT_DYNAMODB_URL, or a dynalite started at the first call. It skips
// t (fails it under FENCEKIT_REQUIRE_BACKENDS=1) when there is none.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() { shared.srv, shared.err = open() })
	if shared.err != nil {
		testkit.Unavailable(t, "DynamoDB server", fmt.Sprintf("%v; set %s, or let the test install dynalite %s (needs node and npm, and the npm registry)", shared.err, URLEnv, Version))
	}
	return shared.srv
}

// Open returns the server for this test binary as Shared does, for code
// without a testing.TB (examples): an error instead of a skip.
func Open() (*Server, error) {
	shared.once.Do(func() { shared.srv, shared.err = open() })
	return shared.srv, shared.err
}

// Main runs the tests and then stops the shared server, if one was started.
// Unless FENCEKIT_DYNAMODB_URL is set it first installs dynalite, so that a
// cold install does not count against the test binary's -timeout; a failed
// install is reported by Shared, to the tests that need the server.
func Main(m *testing.M) int {
	if strings.TrimSpace(os.Getenv(URLEnv)) == "" {
		start := time.Now()
		if _, err := Install(); err == nil && time.Since(start) > time.Second {
			fmt.Fprintf(os.Stderr, "dynalitetest: installed dynalite %s in %v\n", Version, time.Since(start).Round(time.Second))
		}
	}
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	return code
}

func open() (*Server, error) {
	if ep := strings.TrimSpace(os.Getenv(URLEnv)); ep != "" {
		region := strings.TrimSpace(os.Getenv("FENCEKIT_DYNAMODB_REGION"))
		if region == "" {
			region = "us-east-1"
		}
		return &Server{Name: URLEnv + " " + ep, Endpoint: ep, region: region}, nil
	}
	return Start()
}

var installOnce = sync.OnceValues(install)

// Install returns the path of serve.js (the script that starts dynalite),
// installing dynalite with it the first
// time into the user cache directory, under a name that hashes the
// package-lock.json (an edit installs anew). Concurrent test binaries wait
// for one install (a file lock); within one binary the outcome is kept.
func Install() (string, error) { return installOnce() }

func install() (string, error) {
	lock, err := npmFiles.ReadFile("npm/package-lock.json")
	if err != nil {
		return "", err
	}
	pkg, err := npmFiles.ReadFile("npm/package.json")
	if err != nil {
		return "", err
	}
	serve, err := npmFiles.ReadFile("npm/serve.js")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append(append([]byte{}, pkg...), lock...), serve...))
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory for dynalite: %w", err)
	}
	dir := filepath.Join(cache, "fencekit", "dynalite-"+Version+"-"+hex.EncodeToString(sum[:])[:12])
	cli := filepath.Join(dir, "serve.js")
	if _, err := os.Stat(filepath.Join(dir, "installed")); err == nil {
		return cli, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, "install.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "installed")); err == nil {
		return cli, nil // installed by another test binary while this one waited
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("no npm to install dynalite: %w", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("no node to run dynalite: %w", err)
	}
	for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock, "serve.js": serve} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// --ignore-scripts: no native build. Start keeps the tables in memory;
	// StartOnDisk's LevelDB (classic-level) loads the prebuilt binary its
	// package ships for the platform, with no install script.
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install dynalite (npm ci in %s): %v\n%s", dir, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "dynalite", "cli.js")); err != nil {
		return "", fmt.Errorf("npm ci left no dynalite: %w", err)
	}
	// The marker comes last: a half-finished install is done again.
	if err := os.WriteFile(filepath.Join(dir, "installed"), nil, 0o644); err != nil {
		return "", err
	}
	return cli, nil
}

// Start installs dynalite if needed and starts one on a free loopback
// port, in memory, with tables active as soon as they are created. Stop
// ends it.
func Start() (*Server, error) { return start("") }

// StartOnDisk starts dynalite as Start does, but with its tables in a
// LevelDB store under dir (dynalite's --path) instead of in memory, so
// that Restart finds them again.
func StartOnDisk(dir string) (*Server, error) {
	if dir == "" {
		return nil, fmt.Errorf("dynalitetest: StartOnDisk needs a directory")
	}
	return start(dir)
}

func start(dir string) (*Server, error) {
	cli, err := Install()
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("no node to run dynalite: %w", err)
	}
	logf, err := os.CreateTemp("", "fencekit-dynalite-*.log")
	if err != nil {
		return nil, err
	}
	_ = logf.Close()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := servers.FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{
			Name:     "dynalite " + Version + " (in memory)",
			Endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
			Dynalite: true,
			region:   "us-east-1",
			log:      logf.Name(),
			args: []string{cli, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
				"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"},
		}
		if dir != "" {
			s.Name = "dynalite " + Version + " (LevelDB in " + dir + ")"
			s.args = append(s.args, "--path", dir)
			s.onDisk = true
		}
		if lastErr = s.launch(exec.Command(node, s.args...)); lastErr == nil {
			return s, nil
		}
	}
	_ = os.Remove(logf.Name())
	return nil, lastErr
}

// Restart kills a server StartOnDisk started (SIGKILL, as a crash would)
// and starts it again on the same port and the same LevelDB store, and
// returns once it listens again. The store keeps every write the server
// acknowledged: LevelDB has handed it to the operating system, which keeps
// it across the death of the process. A server in memory would come back
// empty, so Restart refuses it.
func (s *Server) Restart() error {
	if !s.onDisk {
		return fmt.Errorf("dynalitetest: %s keeps its data in memory; only a server StartOnDisk started can restart", s.Name)
	}
	s.kill()
	return s.launch(exec.Command(s.cmd.Path, s.args...))
}

// launch starts cmd, the server process, and waits until its port accepts
// connections.
func (s *Server) launch(cmd *exec.Cmd) error {
	logf, err := os.OpenFile(s.log, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.cmd = cmd
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := servers.Start(s.cmd); err != nil {
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
			return fmt.Errorf("%s at %s exited at start: %s", s.Name, s.Endpoint, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("%s at %s: not listening after 30s: %v\n%s", s.Name, s.Endpoint, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop ends a server this package started.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.kill()
	if os.Getenv("FENCEKIT_KEEP_LOGS") == "" {
		_ = os.Remove(s.log)
	}
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
