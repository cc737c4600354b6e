// Package pgenv finds a PostgreSQL server for the ledger demo, so that `make demo` needs no set-up.
//
// In mode Auto it tries, in order:
//  1. the given URL (--database-url or DATABASE_URL), if any;
//  2. a server on 127.0.0.1:5432 (user postgres, database postgres, no password), if one answers;
//  3. a throwaway cluster started from the local PostgreSQL binaries (initdb and pg_ctl on PATH, or
//     under /usr/lib/postgresql/*/bin and the other usual places), in a temporary directory, on a
//     free port, stopped and removed by Close. initdb refuses to run as root, so as root the cluster
//     runs as the postgres user (runuser -u postgres);
//  4. a PostgreSQL container, when Docker is available, removed by Close: started by txinbox-testpg,
//     the command txinboxtest/cmd/txinbox-testpg (testcontainers-go), run with go run in txinbox's
//     module, so that the demo's own build needs no Docker client and fetches none;
//  5. otherwise it fails with one message saying what to install.
//
// The other modes force one of these ways (the tests use Cluster to exercise the throwaway cluster).
package pgenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Mode selects how Open finds a server.
type Mode string

// The modes.
const (
	Auto      Mode = "auto"      // URL, then 127.0.0.1:5432, then a throwaway cluster, then a container
	URL       Mode = "url"       // only the given URL
	Local     Mode = "local"     // only 127.0.0.1:5432
	Cluster   Mode = "cluster"   // only a throwaway cluster from local binaries
	Container Mode = "container" // only a container
)

// ParseMode parses a mode name ("" is Auto).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Auto, nil
	case Auto, URL, Local, Cluster, Container:
		return m, nil
	}
	return "", fmt.Errorf("pgenv: unknown mode %q (auto, url, local, cluster or container)", s)
}

// LocalURL is the server tried on 127.0.0.1:5432.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// localURL, searchPatterns and containerStart are variables for the tests.
var (
	localURL = LocalURL
	// containerStart starts a PostgreSQL container (startContainer); the tests replace it to hide a
	// Docker that answers.
	containerStart = startContainer
	// searchPatterns are the directories searched for initdb and pg_ctl when they are not on PATH.
	searchPatterns = []string{
		"/usr/lib/postgresql/*/bin",         // Debian, Ubuntu
		"/usr/pgsql-*/bin",                  // RHEL, Fedora (PGDG)
		"/usr/local/pgsql/bin",              // built from source
		"/opt/homebrew/opt/postgresql*/bin", // Homebrew, Apple silicon
		"/usr/local/opt/postgresql*/bin",    // Homebrew, Intel
		"/Applications/Postgres.app/Contents/Versions/*/bin",
	}
)

// Server is the server found. Close it when done: it stops and removes what Open started.
type Server struct {
	// URL is the connection string.
	URL string
	// Description says which server it is, for humans.
	Description string
	// Dir is the data directory's parent of a throwaway cluster ("" otherwise).
	Dir string
	// Throwaway is true for a throwaway cluster or a container, which Close removes with everything in
	// it; false for a given URL or the local server, which outlive the demo.
	Throwaway bool
	close     func() error
}

// Close stops and removes a throwaway cluster or container; it does nothing for other servers.
func (s *Server) Close() error {
	if s == nil || s.close == nil {
		return nil
	}
	f := s.close
	s.close = nil
	return f()
}

// Open finds a server in mode (see the package documentation). url is the given connection string
// ("" if none). logf, if not nil, is told what is being tried.
func Open(ctx context.Context, mode Mode, url string, logf func(format string, args ...any)) (*Server, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var tried []string
	if mode == Auto || mode == URL {
		if url != "" {
			if err := ping(ctx, url); err != nil {
				return nil, fmt.Errorf("pgenv: the given database URL does not answer: %w", err)
			}
			return &Server{URL: url, Description: "given URL (" + redact(url) + ")"}, nil
		}
		if mode == URL {
			return nil, errors.New("pgenv: no database URL given (--database-url or DATABASE_URL)")
		}
		tried = append(tried, "DATABASE_URL: not set")
	}
	if mode == Auto || mode == Local {
		err := ping(ctx, localURL)
		if err == nil {
			return &Server{URL: localURL, Description: "local server 127.0.0.1:5432"}, nil
		}
		if mode == Local {
			return nil, fmt.Errorf("pgenv: nothing usable on 127.0.0.1:5432: %w", err)
		}
		tried = append(tried, "127.0.0.1:5432: "+oneLine(err))
		logf("no usable server on 127.0.0.1:5432 (%v); trying local PostgreSQL binaries", oneLine(err))
	}
	if mode == Auto || mode == Cluster {
		s, err := StartCluster(ctx, logf)
		if err == nil {
			return s, nil
		}
		if mode == Cluster {
			return nil, err
		}
		tried = append(tried, "throwaway cluster: "+oneLine(err))
		logf("no throwaway cluster (%v); trying Docker", oneLine(err))
	}
	s, err := containerStart(ctx, logf)
	if err == nil {
		return s, nil
	}
	if mode == Container {
		return nil, err
	}
	tried = append(tried, "Docker: "+oneLine(err))
	return nil, fmt.Errorf("no PostgreSQL server found for the demo. Tried:\n  - %s\n"+
		"Install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) so that\n"+
		"initdb and pg_ctl are available, or install and start Docker, or set DATABASE_URL=postgres://user:pass@host:5432/db",
		strings.Join(tried, "\n  - "))
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

var passwordRE = regexp.MustCompile(`(://[^:/@]*:)[^@]*@`)

// redact hides the password of a URL.
func redact(url string) string { return passwordRE.ReplaceAllString(url, "${1}xxxxx@") }

// HasPassword reports whether url holds a password (postgres://user:password@...).
func HasPassword(url string) bool { return redact(url) != url }

// Binaries returns the directory holding initdb and pg_ctl: the one on PATH, or the newest of the usual
// installation directories.
func Binaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	var dirs []string
	for _, pattern := range searchPatterns {
		m, _ := filepath.Glob(pattern)
		for _, d := range m {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
				dirs = append(dirs, d)
			}
		}
	}
	if len(dirs) == 0 {
		return "", errors.New("initdb and pg_ctl not found on PATH nor under /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin, /usr/local/pgsql/bin or Homebrew")
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs[0], nil
}

var (
	digitsRE  = regexp.MustCompile(`\d+`)
	versionRE = regexp.MustCompile(`\d+(\.\d+)*`)
)

func version(dir string) int {
	n, _ := strconv.Atoi(digitsRE.FindString(dir))
	return n
}

// StartCluster initialises and starts a throwaway cluster from the local binaries: a temporary
// directory, trust authentication for user postgres, listening on 127.0.0.1 on a free port (and on a
// Unix socket in the directory). Close stops it and removes the directory.
func StartCluster(ctx context.Context, logf func(format string, args ...any)) (*Server, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if runtime.GOOS == "windows" {
		return nil, errors.New("throwaway clusters are not supported on Windows")
	}
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	// initdb refuses to run as root: run the cluster as the postgres user then.
	var wrap []string
	var uid, gid = -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("running as root, and initdb refuses root: create a postgres user (useradd postgres) or run as another user")
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			return nil, errors.New("running as root, and initdb refuses root: runuser (util-linux) is needed to run it as postgres")
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		wrap = []string{runuser, "-u", "postgres", "--"}
	}
	dir, err := os.MkdirTemp("", "ledger-demo-pg-")
	if err != nil {
		return nil, err
	}
	cleanupDir := func() { _ = os.RemoveAll(dir) }
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			cleanupDir()
			return nil, err
		}
	}
	run := func(ctx context.Context, name string, args ...string) error {
		argv := append(append(append([]string{}, wrap...), filepath.Join(bin, name)), args...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(lastLines(out.String(), 8)))
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	logf("initialising a throwaway PostgreSQL cluster in %s (%s)", dir, bin)
	if err := run(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		cleanupDir()
		return nil, err
	}
	logFile := filepath.Join(dir, "postgres.log")
	var port int
	for attempt := 0; ; attempt++ {
		port, err = freePort()
		if err != nil {
			cleanupDir()
			return nil, err
		}
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200", port, dir)
		err = run(ctx, "pg_ctl", "-D", data, "-l", logFile, "-o", opts, "-w", "-t", "60", "start")
		if err == nil {
			break
		}
		if attempt == 2 { // a port taken between our probe and the server's bind: try another twice
			b, _ := os.ReadFile(logFile)
			cleanupDir()
			return nil, fmt.Errorf("%w\n%s", err, lastLines(string(b), 8))
		}
	}
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := run(sctx, "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
		cleanupDir()
		return err
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := ping(ctx, url); err != nil {
		_ = stop()
		return nil, fmt.Errorf("throwaway cluster started but does not answer: %w", err)
	}
	version := "PostgreSQL"
	if out, err := exec.Command(filepath.Join(bin, "pg_ctl"), "--version").Output(); err == nil {
		version = "PostgreSQL " + versionRE.FindString(string(out)) // "pg_ctl (PostgreSQL) 15.20 (Debian ...)"
	}
	return &Server{URL: url, Dir: dir, Throwaway: true, close: stop,
		Description: fmt.Sprintf("throwaway cluster on 127.0.0.1:%d (%s, data in %s, removed at exit)", port, version, dir)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startContainer starts a PostgreSQL container with txinbox-testpg (testdb.DefaultLauncher: go run in
// the repository's root module; the first run downloads and builds it). Close closes the
// command's standard input, which removes the container.
func startContainer(ctx context.Context, logf func(format string, args ...any)) (*Server, error) {
	if err := testdb.DockerAvailable(); err != nil {
		return nil, err
	}
	l, err := testdb.DefaultLauncher()
	if err != nil {
		return nil, err
	}
	logf("starting a PostgreSQL container (%s in %s)", strings.Join(l.Command, " "), l.Dir)
	p, err := l.Start(ctx)
	if err != nil {
		return nil, err
	}
	return &Server{URL: p.URL, Description: "container postgres:15-alpine (txinbox-testpg, removed at exit)", Throwaway: true, close: p.Stop}, nil
}
