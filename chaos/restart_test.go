package chaos_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/txinbox/txinbox/chaos"
)

// pgBinDir holds the PostgreSQL 15 server binaries the restart test runs (TXCHAOS_PG_BIN overrides).
const pgBinDir = "/usr/lib/postgresql/15/bin"

// cluster is a throwaway PostgreSQL server of one test: its own data directory, port and socket
// directory under a temporary directory. It is never the shared server on 5432.
type cluster struct {
	bin, dir, data string
	port           int
	asPostgres     bool // running as root: every server command runs as the postgres user
}

// startCluster initialises and starts a cluster, stopped and removed when t ends. Without the server
// binaries it skips t, or fails it when CI=true.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin := pgBinDir
	if b := os.Getenv("TXCHAOS_PG_BIN"); b != "" {
		bin = b
	}
	for _, tool := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("PostgreSQL server binaries not found (%v): install postgresql-15 or set TXCHAOS_PG_BIN", err)
			}
			t.Skipf("skipping: PostgreSQL server binaries not found (%v); install postgresql-15 or set TXCHAOS_PG_BIN", err)
		}
	}
	dir, err := os.MkdirTemp("", "txchaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data"), asPostgres: os.Geteuid() == 0}
	if c.asPostgres {
		// initdb refuses to run as root: the postgres user owns the directory and runs the server.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = c.ctl(context.Background(), "-D", c.data, "-m", "immediate", "-w", "stop")
		_ = os.RemoveAll(dir)
	})
	c.port = freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "sock")
	if out, err := c.run(ctx, "mkdir", "-p", sock); err != nil { // as the server's user
		t.Fatalf("mkdir: %v\n%s", err, out)
	}
	conf := fmt.Sprintf("\n# txchaos restart test\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nmax_connections = 60\n", c.port, sock)
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.ctl(ctx, "-D", c.data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return c
}

// URL is the connection string of the cluster (TCP on 127.0.0.1 and its own port).
func (c *cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Restart restarts the server with a fast shutdown: every connection is terminated, running
// transactions roll back.
func (c *cluster) Restart(ctx context.Context) error {
	out, err := c.ctl(ctx, "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-m", "fast", "-w", "-t", "60", "restart")
	if err != nil {
		return fmt.Errorf("pg_ctl restart: %v: %s", err, out)
	}
	return nil
}

func (c *cluster) ctl(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, filepath.Join(c.bin, "pg_ctl"), args...)
}

// run runs a command of the cluster (a bare name is one of its binaries), as postgres when we are
// root.
func (c *cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if name == "initdb" {
		name = filepath.Join(c.bin, name)
	}
	if c.asPostgres {
		args = append([]string{"-u", "postgres", "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on right now (never 5432).
func freePort(t *testing.T) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 5432 {
			return port
		}
	}
}

// TestServerRestart runs producers and worker processes against a server of its own and restarts it
// (pg_ctl restart -m fast) twice mid-run: producers re-send what they could not confirm, workers
// reconnect with backoff, and every message is still applied exactly once.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	cfg := chaos.Config{
		URL: c.URL(), Messages: 3000, Poison: 3, Duration: 20 * time.Second,
		NoKills: true, NoCuts: true, Restarts: 2, RestartServer: c.Restart,
		Seed: seed(t), WorkerCommand: workerCommand(), LogDir: t.TempDir(), Progress: logWriter{t},
	}
	rep, err := chaos.Run(context.Background(), cfg)
	report(t, rep, err)
	if rep.ServerRestarts != 2 {
		t.Fatalf("%d server restarts, want 2", rep.ServerRestarts)
	}
	// The producers deliver until 90% of the run, well after the last restart (at two thirds): the
	// workers must have reconnected to complete them.
	if rep.CompletedAfterRestart == 0 {
		t.Fatal("no message completed after the last restart")
	}
}
