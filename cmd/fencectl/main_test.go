package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

func TestMain(m *testing.M) {
	// The DynamoDB backend signs with the AWS SDK's default credential
	// chain, which, finding no key, would ask the EC2 instance metadata
	// service (an address off this machine): TestEveryBackend's DynamoDB
	// case is given a key, and the lookup is off.
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		os.Setenv("AWS_ACCESS_KEY_ID", "fencekit")
		os.Setenv("AWS_SECRET_ACCESS_KEY", "fencekit-secret")
	}
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	os.Exit(m.Run())
}

// ctl runs this binary's fencectl (fencectl.Main with the DynamoDB, etcd
// and NATS backends that main imports registered) with args and env, and
// returns its exit code, stdout and stderr.
func ctl(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := fencectl.Main(args, nil, &out, &errOut, func(k string) string { return env[k] })
	t.Logf("$ fencectl %s\n%s%s(exit %d)", strings.Join(args, " "), out.String(), errOut.String(), code)
	return code, out.String(), errOut.String()
}

// TestHelpListsEveryBackend: --help lists every backend's flags, each
// under the heading of its backend, NATS's buckets and DynamoDB's tables
// included, and --prefix and --store-prefix under each backend they apply
// to, their help naming them all rather than Redis alone, each with its
// default (DynamoDB's differ: a Backend has a prefix, a Store none)
// (Hardening IV, 6 and 7).
func TestHelpListsEveryBackend(t *testing.T) {
	code, out, help := ctl(t, nil, "--help")
	require.Equal(t, 0, code)
	require.Equal(t, "", out)
	want := []struct {
		heading string
		flags   []string
	}{
		{"general flags:", []string{"--backend", "--json", "--timeout"}},
		{"command (release, bump, watch) flags:", []string{"--force", "--fence", "--no-fence", "--allow-unwritten", "--owner", "--by", "--interval", "--count"}},
		{"Redis (--backend redis) flags:", []string{"--redis-url", "--redis-cluster", "--prefix", "--store-prefix"}},
		{"PostgreSQL (--backend postgres, or postgres-sqldb through database/sql) flags:", []string{"--postgres-url", "--lease-table", "--store-table"}},
		{"MySQL/MariaDB (--backend mysql) flags:", []string{"--mysql-url", "--lease-table", "--store-table"}},
		{"DynamoDB (--backend dynamodb) flags:", []string{"--dynamodb-url", "--dynamodb-table", "--dynamodb-store-table", "--dynamodb-region", "--prefix", "--store-prefix"}},
		{"etcd (--backend etcd) flags:", []string{"--etcd-endpoints", "--prefix", "--store-prefix"}},
		{"NATS JetStream KV (--backend nats) flags:", []string{"--nats-url", "--nats-bucket", "--nats-store-bucket", "--prefix", "--store-prefix"}},
	}
	sections := map[string]string{}
	headings := regexp.MustCompile(`(?m)^\S.* flags:$`).FindAllStringIndex(help, -1)
	require.Equal(t, len(want), len(headings), help)
	for i, h := range headings {
		end := len(help)
		if i+1 < len(headings) {
			end = headings[i+1][0]
		}
		sections[help[h[0]:h[1]]] = help[h[1]:end]
	}
	for _, w := range want {
		section, ok := sections[w.heading]
		require.True(t, ok, "no heading %q in\n%s", w.heading, help)
		for _, f := range w.flags {
			require.True(t, regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(f)+`( |$)`).MatchString(section), "%s lists no %s:\n%s", w.heading, f, section)
		}
	}
	require.Contains(t, help, `key prefix of the locks (BackendOptions.Prefix): Redis (default "fencekit"), DynamoDB (default "fencekit-lock/"), etcd (default "fencekit/"), NATS JetStream KV (default "fencekit")`)
	require.Contains(t, help, `key prefix of the fenced store (StoreOptions.Prefix): Redis (default "fencekit"), DynamoDB (default ""), etcd (default "fencekit/"), NATS JetStream KV (default "fencekit")`)
	require.Contains(t, help, "redis, postgres, mysql, postgres-sqldb (PostgreSQL through database/sql and adapters/sqldb), dynamodb, etcd or nats; needed only when several servers are named")
	require.False(t, strings.Contains(help, "Redis only") || strings.Contains(help, "Redis: key prefix"), help)
	for _, v := range []string{"$FENCEKIT_REDIS_URL", "$FENCEKIT_POSTGRES_URL", "$FENCEKIT_MYSQL_URL", "$FENCEKIT_ETCD_ENDPOINTS",
		"$FENCEKIT_NATS_URL", "$FENCEKIT_NATS_BUCKET", "$FENCEKIT_NATS_STORE_BUCKET",
		"$FENCEKIT_DYNAMODB_URL", "$FENCEKIT_DYNAMODB_TABLE", "$FENCEKIT_DYNAMODB_STORE_TABLE", "$FENCEKIT_DYNAMODB_REGION"} {
		require.Contains(t, help, v)
	}
}

// TestEveryBackend: one binary reaches every backend. Each server flag
// (or, alone, its variable) chooses its backend, whose connection code
// runs: pointed at a closed port, each says which server it could not
// reach (exit 1). Several variables and no --backend is a usage error
// that names them all; --backend picks one of them; the message for no
// server names every flag.
func TestEveryBackend(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flag, env, addr, want string
		extra                 []string
	}{
		{"--redis-url", "FENCEKIT_REDIS_URL", "redis://127.0.0.1:1/0", "cannot reach Redis at 127.0.0.1:1", nil},
		{"--postgres-url", "FENCEKIT_POSTGRES_URL", "postgres://postgres@127.0.0.1:1/test", "cannot reach PostgreSQL at 127.0.0.1:1", nil},
		{"--mysql-url", "FENCEKIT_MYSQL_URL", "root@tcp(127.0.0.1:1)/test", "cannot reach MySQL at 127.0.0.1:1", nil},
		{"--dynamodb-url", "FENCEKIT_DYNAMODB_URL", "http://127.0.0.1:1", "cannot reach DynamoDB at http://127.0.0.1:1", []string{"--dynamodb-table", "locks"}},
		{"--etcd-endpoints", "FENCEKIT_ETCD_ENDPOINTS", "http://127.0.0.1:1", "cannot reach etcd at http://127.0.0.1:1", nil},
		{"--nats-url", "FENCEKIT_NATS_URL", "nats://127.0.0.1:1", "cannot reach NATS at nats://127.0.0.1:1", []string{"--nats-bucket", "locks"}},
	}
	all := map[string]string{}
	for _, c := range cases {
		all[c.env] = c.addr
	}
	for _, c := range cases {
		t.Run(c.flag, func(t *testing.T) {
			t.Parallel()
			// By flag, over every other backend's variable.
			code, _, errOut := ctl(t, all, append([]string{c.flag, c.addr, "--timeout", "2s", "inspect", "x"}, c.extra...)...)
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "fencectl: "+c.want)
			// By variable, alone.
			code, _, errOut = ctl(t, map[string]string{c.env: c.addr}, append([]string{"--timeout", "2s", "list"}, c.extra...)...)
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "fencectl: "+c.want)
		})
	}
	code, _, errOut := ctl(t, all, "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "servers of redis and postgres and mysql and dynamodb and etcd and nats are named: choose one with --backend")
	code, _, errOut = ctl(t, all, "--backend", "nats", "--nats-bucket", "locks", "--timeout", "2s", "inspect", "x")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cannot reach NATS at nats://127.0.0.1:1")
	code, _, errOut = ctl(t, all, "--backend", "dynamodb", "--dynamodb-table", "locks", "--timeout", "2s", "inspect", "x")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cannot reach DynamoDB at http://127.0.0.1:1")
	code, _, errOut = ctl(t, nil, "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "no server: set --redis-url, --postgres-url, --mysql-url, --dynamodb-url, --etcd-endpoints or --nats-url")
	code, _, errOut = ctl(t, nil, "--backend", "cassandra", "--redis-url", "redis://a", "inspect", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown backend "cassandra" (have: redis, postgres, mysql, postgres-sqldb, dynamodb, etcd, nats)`)
}

// installCommand is how the docs tell an operator to install fencectl,
// from the repository root.
const installCommand = "go -C cmd/fencectl install ."

// TestBinaryOnRedis: the binary, installed as the docs say (installCommand,
// into a GOBIN of the test's own), is called fencectl and drives a held
// lock on a real Redis end to end: inspect, fence, and release --force,
// whose fence refuses the evicted holder's write.
func TestBinaryOnRedis(t *testing.T) {
	t.Parallel()
	gobin := t.TempDir()
	args := strings.Fields(installCommand)
	install := exec.Command(args[0], args[1:]...)
	install.Dir = filepath.Join("..", "..")
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	install.Stderr = os.Stderr
	require.NoError(t, install.Run())
	bin := filepath.Join(gobin, "fencectl")

	client := testkit.Redis(t)
	prefix := testkit.RedisPrefix(t, client)
	backend := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix})
	store := fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: prefix + "s"})
	ctx := testkit.Context(t)
	lease, err := lock.New(backend, &lock.Options{Metadata: "host=worker-7"}).Acquire(ctx, "jobs/nightly", time.Minute)
	require.NoError(t, err)
	defer lease.Release(ctx)
	writer := lease.Fenced(store)
	require.NoError(t, writer.Put(ctx, "report", []byte("v1")))

	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, append([]string{"--redis-url", testkit.RedisURL(t), "--prefix", prefix, "--store-prefix", prefix + "s"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("run %s: %v", bin, err)
		}
		t.Logf("$ fencectl %s\n%s%s(exit %d)", strings.Join(args, " "), out.String(), errOut.String(), cmd.ProcessState.ExitCode())
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}
	code, out, _ := run("inspect", "jobs/nightly")
	require.Equal(t, 0, code)
	require.Contains(t, out, "jobs/nightly: held")
	require.Contains(t, out, "host=worker-7")
	code, out, _ = run("--json", "fence", "report")
	require.Equal(t, 0, code)
	var fv struct {
		Fence    int64 `json:"fence"`
		HasValue bool  `json:"has_value"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &fv))
	require.Equal(t, int64(lease.Token()), fv.Fence)
	require.True(t, fv.HasValue)
	code, out, _ = run("release", "--force", "jobs/nightly", "--fence", "report")
	require.Equal(t, 0, code)
	require.Contains(t, out, fmt.Sprintf("fence report: %d (token %d is refused there from now on)", lease.Token()+1, lease.Token()))
	require.ErrorIs(t, writer.Put(ctx, "report", []byte("late")), fence.ErrStale)
}

// TestDocsNameOneFencectl: the README and the docs (the adapters' with a
// fencectl backend among them) give the install command that
// TestBinaryOnRedis runs, and name no other fencectl binary (the etcd and
// NATS modules had one each).
func TestDocsNameOneFencectl(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, doc := range []string{"README.md", "docs/operations.md", "docs/nats.md", "docs/etcd.md", "docs/dynamodb.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		text := string(b)
		require.True(t, strings.Contains(text, installCommand), "%s does not give the install command %q", doc, installCommand)
		// (Spelt in parts, so that a grep for the old paths finds none.)
		for _, old := range []string{"adapters/etcd/" + "cmd/fencectl", "adapters/nats/" + "cmd/fencectl", "build ./cmd/fencectl", "run ./cmd/fencectl"} {
			require.False(t, strings.Contains(text, old), "%s still names %s", doc, old)
		}
	}
}
