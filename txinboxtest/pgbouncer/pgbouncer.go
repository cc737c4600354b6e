// Package pgbouncer starts a throwaway PgBouncer for a test, in front of a PostgreSQL server the
// test names: its own configuration, port and log in a directory of its own, stopped and removed
// when the test ends. It is never a shared pooler.
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package pgbouncer

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Debian's package installs the binary out of most users' PATH.
const debianBinary = "/usr/sbin/pgbouncer"

// Binary returns the path of the pgbouncer binary: TXINBOX_PGBOUNCER if set (and "" if nothing is
// there), else pgbouncer on PATH, else Debian's /usr/sbin/pgbouncer; "" if none exists.
func Binary() string {
	if b := os.Getenv("TXINBOX_PGBOUNCER"); b != "" {
		if _, err := os.Stat(b); err != nil {
			return ""
		}
		return b
	}
	if b, err := exec.LookPath("pgbouncer"); err == nil {
		return b
	}
	if _, err := os.Stat(debianBinary); err == nil {
		return debianBinary
	}
	return ""
}

// Config is a PgBouncer's settings.
type Config struct {
	// Mode is its pool_mode: "transaction" (the default), "session" or "statement".
	Mode string
	// PoolSize is its default_pool_size: the server connections per user and database. Default: 10.
	PoolSize int
	// Settings are more lines of its [pgbouncer] section, such as "ignore_startup_parameters = search_path".
	Settings []string
}

// Start starts a PgBouncer in front of the server of serverURL (its host, port, user and password;
// clients log in to PgBouncer with trust) and returns the URL of the same database through it. It
// runs as the postgres user when the test runs as root (PgBouncer refuses root), and is killed when t
// ends. Without a pgbouncer binary it skips t, or fails it when CI=true.
func Start(t testing.TB, serverURL string, cfg Config) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("pgbouncer not found (PATH, /usr/sbin, TXINBOX_PGBOUNCER): apt-get install pgbouncer")
		}
		t.Skip("skipping: pgbouncer not found (PATH, /usr/sbin, TXINBOX_PGBOUNCER); apt-get install pgbouncer")
	}
	if cfg.Mode == "" {
		cfg.Mode = "transaction"
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 10
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parents are private to the test's user, and PgBouncer may run as another.
	dir, err := os.MkdirTemp("", "txinbox-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	asPostgres := os.Geteuid() == 0
	port := freePort(t)
	ini := filepath.Join(dir, "pgbouncer.ini")
	logFile := filepath.Join(dir, "pgbouncer.log")
	files := map[string]string{
		filepath.Join(dir, "users.txt"): fmt.Sprintf("%q %q\n", server.User, server.Password),
		ini: strings.Join(append([]string{
			"[databases]",
			fmt.Sprintf("* = host=%s port=%d", server.Host, server.Port),
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			fmt.Sprintf("listen_port = %d", port),
			"unix_socket_dir =",
			"auth_type = trust",
			"auth_file = " + filepath.Join(dir, "users.txt"),
			"pool_mode = " + cfg.Mode,
			fmt.Sprintf("default_pool_size = %d", cfg.PoolSize),
			"max_client_conn = 500",
			"logfile = " + logFile,
		}, cfg.Settings...), "\n") + "\n",
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	name, args := bin, []string{ini}
	if asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user to run pgbouncer as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, ini, filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		name, args = "runuser", append([]string{"-u", "postgres", "--", bin}, args...)
	}
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // runuser and pgbouncer: one group to stop
	out, err := os.Create(filepath.Join(dir, "stderr.txt"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = out.Close(); close(exited) }()
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited at start:\n%s\n%s", readFile(filepath.Join(dir, "stderr.txt")), readFile(logFile))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not listen on %s within 15s:\n%s", addr, readFile(logFile))
		}
		time.Sleep(50 * time.Millisecond)
	}
	u := url.URL{Scheme: "postgres", User: url.User(server.User), Host: addr, Path: "/" + server.Database, RawQuery: "sslmode=disable"}
	return u.String()
}

func readFile(name string) string {
	b, _ := os.ReadFile(name)
	return string(b)
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
