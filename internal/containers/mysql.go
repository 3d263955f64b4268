package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// MySQLImageEnv overrides DefaultMySQLImage.
const MySQLImageEnv = "FENCEKIT_MYSQL_IMAGE"

// DefaultMySQLImage is the official image the MariaDB container runs.
const DefaultMySQLImage = "mariadb:10.11"

// mysqlStartup bounds the wait for the first successful ping: the first
// start initialises the data directory (mariadb-install-db), which takes
// several seconds on a busy machine.
const mysqlStartup = 2 * time.Minute

var mysqlContainer started

// MySQLURL returns the DSN (go-sql-driver/mysql syntax, user root, database
// test) of a MariaDB container shared by every test of the test binary,
// started on the first call. Tests must keep to a database of their own
// (testkit.MySQLConfigAt). Without Docker, t is skipped, or failed under
// FENCEKIT_REQUIRE_CONTAINERS=1.
//
// The container is a plain testcontainers request, not a module: the
// mariadb module is not served at the version of testcontainers-go this
// module uses, and the mysql module waits for a log line that only
// MySQL prints. It is ready when the port accepts connections and a ping
// with the root password succeeds.
func MySQLURL(t testing.TB) string {
	t.Helper()
	url, err := mysqlContainer.get(func(ctx context.Context) (string, error) {
		img := image(MySQLImageEnv, DefaultMySQLImage)
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("root password: %w", err)
		}
		password := hex.EncodeToString(b[:])
		dsn := func(addr string) string {
			cfg := mysql.NewConfig()
			cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = "root", password, "tcp", addr, "test"
			return cfg.FormatDSN()
		}
		ctr, err := testcontainers.Run(ctx, img,
			testcontainers.WithExposedPorts("3306/tcp"),
			testcontainers.WithEnv(map[string]string{
				"MARIADB_ROOT_PASSWORD": password,
				"MARIADB_DATABASE":      "test",
			}),
			testcontainers.WithWaitStrategy(
				wait.ForListeningPort("3306/tcp").WithStartupTimeout(mysqlStartup),
				wait.ForSQL("3306/tcp", "mysql", func(host string, port network.Port) string {
					return dsn(net.JoinHostPort(host, port.Port()))
				}).WithStartupTimeout(mysqlStartup).WithPollInterval(250*time.Millisecond),
			),
		)
		if err != nil {
			if ctr != nil {
				_ = testcontainers.TerminateContainer(ctr)
			}
			return "", fmt.Errorf("mariadb container %s: %w", img, err)
		}
		addr, err := ctr.PortEndpoint(ctx, "3306/tcp", "")
		if err != nil {
			_ = testcontainers.TerminateContainer(ctr)
			return "", fmt.Errorf("mariadb container %s: %w", img, err)
		}
		return dsn(addr), nil
	})
	if err != nil {
		unavailable(t, "MariaDB", err)
	}
	// CI greps for "path:" to show which path each test took. The DSN holds
	// the password, so only the address is printed.
	addr := "?"
	if cfg, perr := mysql.ParseDSN(url); perr == nil {
		addr = cfg.Addr
	}
	t.Logf("path: MariaDB container, image %s, at %s", image(MySQLImageEnv, DefaultMySQLImage), addr)
	return url
}
