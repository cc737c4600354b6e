package testdb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable that selects the test server.
const EnvURL = "TXINBOX_TEST_DATABASE_URL"

// LocalURL is the server tried when EnvURL is not set.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// FindTimeout bounds the whole choice of a server; the first start of a container may build
// txinbox-testpg and pull an image.
const FindTimeout = 10 * time.Minute

// Launch starts a PostgreSQL server in a container with [DefaultLauncher] (txinbox-testpg) and
// returns its URL. The command, and so the server, lives until this process exits: its standard
// input, which it waits on, closes then.
func Launch(ctx context.Context) (string, error) {
	l, err := DefaultLauncher()
	if err != nil {
		return "", err
	}
	p, err := l.Start(ctx)
	if err != nil {
		return "", err
	}
	// p is dropped here, but not collected: the goroutine that waits for its command holds it, and
	// so its stdin, open until this process exits.
	return p.URL, nil
}

// Finder chooses the test server: EnvURL, else LocalURL if it answers, else a container if Docker
// is available, else an error that names the three ways to provide one.
type Finder struct {
	// EnvURL is the value of the TXINBOX_TEST_DATABASE_URL variable; "" when it is not set. When set,
	// it is the only choice: a server that does not answer there is an error.
	EnvURL string
	// LocalURL is the server tried when EnvURL is "".
	LocalURL string
	// Docker returns nil if a container engine seems reachable, else why not.
	Docker func() error
	// Container starts a server when LocalURL does not answer and Docker returned nil.
	Container func(ctx context.Context) (string, error)
}

// DefaultFinder returns the Finder of txinbox's own tests: the environment's
// TXINBOX_TEST_DATABASE_URL, [LocalURL], [DockerAvailable] and [Launch] (the public txinboxtest
// starts its container in-process instead).
func DefaultFinder() Finder {
	return Finder{EnvURL: os.Getenv(EnvURL), LocalURL: LocalURL, Docker: DockerAvailable, Container: Launch}
}

// Find returns the URL of the server f chooses, checked to answer.
func (f Finder) Find(ctx context.Context) (string, error) {
	if f.EnvURL != "" {
		if err := ping(ctx, f.EnvURL); err != nil {
			return "", fmt.Errorf("testdb: %s=%q does not answer: %v", EnvURL, f.EnvURL, err)
		}
		return f.EnvURL, nil
	}
	local := ping(ctx, f.LocalURL)
	if local == nil {
		return f.LocalURL, nil
	}
	cerr := f.Docker()
	if cerr == nil {
		var u string
		if u, cerr = f.Container(ctx); cerr == nil {
			if cerr = ping(ctx, u); cerr == nil {
				return u, nil
			}
			cerr = fmt.Errorf("the container's server at %s does not answer: %v", u, cerr)
		}
	}
	//nolint:staticcheck // ST1005: a multi-line message read by a person setting up the tests, never wrapped
	return "", fmt.Errorf("testdb: no PostgreSQL for the tests:\n"+
		"  - %s is not set;\n  - nothing answers at %s (%v);\n  - no container: %v.\n"+
		"Provide one of them: set %s=postgres://user:pass@host:5432/db; or start PostgreSQL on 127.0.0.1:5432 "+
		"(user postgres, trust auth); or make Docker available (DOCKER_HOST or its socket), for a container "+
		"started with testcontainers-go.",
		EnvURL, hostOf(f.LocalURL), local, cerr, EnvURL)
}

// hostOf returns the host:port of a connection URL, for messages.
func hostOf(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return u
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

// DockerAvailable returns nil if DOCKER_HOST is set or a Docker (or Podman) socket exists in one of
// the usual places, else an error saying where it looked. It does not contact the engine: the
// container start reports that.
func DockerAvailable() error {
	if os.Getenv("DOCKER_HOST") != "" {
		return nil
	}
	var places []string
	places = append(places, "/var/run/docker.sock")
	if home, err := os.UserHomeDir(); err == nil {
		places = append(places, filepath.Join(home, ".docker", "run", "docker.sock"),
			filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
		places = append(places, filepath.Join(rt, "docker.sock"), filepath.Join(rt, "podman", "podman.sock"))
	}
	for _, p := range places {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
	}
	return fmt.Errorf("no Docker: DOCKER_HOST is not set and there is no socket at %s", strings.Join(places, ", "))
}

// Launcher runs a command that starts a PostgreSQL server, writes its URL as the first line of its
// standard output, keeps the server while its standard input is open, and removes it when its
// standard input closes (txinboxtest/cmd/txinbox-testpg).
type Launcher struct {
	// Command is the program and its arguments.
	Command []string
	// Dir is the command's working directory; "" is the current one.
	Dir string
	// Env is added to the process's environment.
	Env []string
}

// DefaultLauncher returns the Launcher of txinbox's own tests: `go run ./txinboxtest/cmd/txinbox-testpg`
// in the root of txinbox's module, found from this package's source. The command, not this package,
// links testcontainers-go, so that the tests of txinbox's packages (and the go.sum of a module
// using them) name no Docker client.
func DefaultLauncher() (Launcher, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return Launcher{}, errors.New("testdb: cannot locate txinbox's module: no caller information")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(dir, "txinboxtest", "cmd", "txinbox-testpg")); err != nil {
		return Launcher{}, fmt.Errorf("testdb: cannot locate txinboxtest/cmd/txinbox-testpg: %w", err)
	}
	return Launcher{Command: []string{"go", "run", "./txinboxtest/cmd/txinbox-testpg"}, Dir: filepath.Clean(dir)}, nil
}

// Launched is a running launcher command.
type Launched struct {
	// URL is the server's connection string, as the command printed it.
	URL   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the command has exited; err is then its result
	err   error
	tail  *tailBuffer
}

// Start runs the command and waits, until ctx ends, for the URL it prints. The command then runs
// until [Launched.Stop] or the end of this process, whose exit closes the command's standard input.
func (l Launcher) Start(ctx context.Context) (*Launched, error) {
	if len(l.Command) == 0 {
		return nil, errors.New("testdb: launcher: no command")
	}
	cmd := exec.Command(l.Command[0], l.Command[1:]...)
	cmd.Dir = l.Dir
	cmd.Env = append(os.Environ(), l.Env...)
	p := &Launched{cmd: cmd, done: make(chan struct{}), tail: &tailBuffer{}}
	cmd.Stderr = p.tail
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testdb: launcher %q: %w", strings.Join(l.Command, " "), err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		s, _ := r.ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, r) // never block the command on a full pipe
	}()
	fail := func(why string) (*Launched, error) {
		_ = p.Stop()
		return nil, fmt.Errorf("testdb: launcher %q (in %s): %s; its stderr ends with:\n%s",
			strings.Join(l.Command, " "), l.Dir, why, p.tail.String())
	}
	select {
	case u := <-line:
		if u == "" {
			return fail("it printed no URL")
		}
		p.URL = u
		return p, nil
	case <-ctx.Done():
		return fail(ctx.Err().Error())
	}
}

// Stop closes the command's standard input, which makes it remove its server and exit, and waits for
// it for up to a minute before killing it. It returns the command's exit error, if any.
func (p *Launched) Stop() error {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
