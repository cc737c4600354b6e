package testdb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// deadURL is a server that cannot answer (nothing listens on port 1).
const deadURL = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"

// The fake launcher is this test binary re-executed: with fakeURLEnv set, TestFakeTestpg plays
// txinbox-testpg (prints the URL, waits for its stdin to close, then records that it removed its
// "server" in the file fakeMarkEnv names).
const (
	fakeURLEnv  = "TESTDB_FAKE_TESTPG_URL"
	fakeMarkEnv = "TESTDB_FAKE_TESTPG_MARK"
	fakeFailEnv = "TESTDB_FAKE_TESTPG_FAIL"
)

func TestFakeTestpg(*testing.T) {
	if msg := os.Getenv(fakeFailEnv); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(3)
	}
	u := os.Getenv(fakeURLEnv)
	if u == "" {
		return // an ordinary test run: nothing to play
	}
	fmt.Println(u)
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := os.WriteFile(os.Getenv(fakeMarkEnv), []byte("removed"), 0o600); err != nil {
		os.Exit(2)
	}
	os.Exit(0)
}

func fakeLauncher(env ...string) testdb.Launcher {
	return testdb.Launcher{Command: []string{os.Args[0], "-test.run=^TestFakeTestpg$"}, Env: env}
}

func must(t *testing.T, what string) func() error {
	return func() error { t.Errorf("%s must not be consulted", what); return errors.New("consulted") }
}

func noContainer(t *testing.T) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		t.Error("no container must be started")
		return "", errors.New("started")
	}
}

// TXINBOX_TEST_DATABASE_URL, when set, is the only choice: a live local server and Docker are not
// consulted, and a URL that does not answer is an error naming the variable.
func TestFindEnvURLIsTheOnlyChoice(t *testing.T) {
	live := testdb.URL(t)
	ctx := context.Background()
	f := testdb.Finder{EnvURL: live, LocalURL: deadURL, Docker: must(t, "Docker"), Container: noContainer(t)}
	if u, err := f.Find(ctx); err != nil || u != live {
		t.Fatalf("Find = %q, %v; want %q", u, err, live)
	}
	f = testdb.Finder{EnvURL: deadURL, LocalURL: live, Docker: must(t, "Docker"), Container: noContainer(t)}
	_, err := f.Find(ctx)
	if err == nil || !strings.Contains(err.Error(), testdb.EnvURL) {
		t.Fatalf("Find with a dead %s = %v; want an error naming it", testdb.EnvURL, err)
	}
}

// Without the variable, a local server that answers is taken before any container.
func TestFindLocalBeforeContainer(t *testing.T) {
	live := testdb.URL(t)
	f := testdb.Finder{LocalURL: live, Docker: must(t, "Docker"), Container: noContainer(t)}
	if u, err := f.Find(context.Background()); err != nil || u != live {
		t.Fatalf("Find = %q, %v; want the local %q", u, err, live)
	}
}

// With no variable and no local server, Docker's presence starts the launcher's command: Find returns
// the URL it printed (checked to answer), the command keeps running, and closing its stdin makes it
// remove its server and exit cleanly.
func TestFindStartsContainerThroughLauncher(t *testing.T) {
	live := testdb.URL(t)
	mark := filepath.Join(t.TempDir(), "removed")
	var launched *testdb.Launched
	f := testdb.Finder{LocalURL: deadURL, Docker: func() error { return nil },
		Container: func(ctx context.Context) (string, error) {
			p, err := fakeLauncher(fakeURLEnv+"="+live, fakeMarkEnv+"="+mark).Start(ctx)
			if err != nil {
				return "", err
			}
			launched = p
			return p.URL, nil
		}}
	u, err := f.Find(context.Background())
	if err != nil || u != live {
		t.Fatalf("Find = %q, %v; want the launched %q", u, err, live)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Fatalf("the launched server was removed while its stdin was still open (stat: %v)", err)
	}
	if err := launched.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if b, err := os.ReadFile(mark); err != nil || string(b) != "removed" {
		t.Fatalf("after Stop the command did not remove its server: %q, %v", b, err)
	}
}

// With nothing available, the error says how to provide each of the three.
func TestFindNoServerNamesTheThreeWays(t *testing.T) {
	f := testdb.Finder{LocalURL: deadURL, Docker: func() error { return errors.New("no Docker here") },
		Container: noContainer(t)}
	_, err := f.Find(context.Background())
	if err == nil {
		t.Fatal("Find with nothing available: nil error")
	}
	for _, want := range []string{testdb.EnvURL + "=postgres://", "127.0.0.1:5432", "make Docker available",
		"testcontainers", "no Docker here"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// A container whose server does not answer, or a launcher that prints no URL, falls through to the
// same message, with the launcher's stderr.
func TestFindContainerFailures(t *testing.T) {
	docker := func() error { return nil }
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"dead URL", []string{fakeURLEnv + "=" + deadURL, fakeMarkEnv + "=" + filepath.Join(t.TempDir(), "m")}, "does not answer"},
		{"no URL", []string{fakeFailEnv + "=cannot reach the Docker engine"}, "cannot reach the Docker engine"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := testdb.Finder{LocalURL: deadURL, Docker: docker, Container: func(ctx context.Context) (string, error) {
				p, err := fakeLauncher(c.env...).Start(ctx)
				if err != nil {
					return "", err
				}
				t.Cleanup(func() { _ = p.Stop() })
				return p.URL, nil
			}}
			_, err := f.Find(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), testdb.EnvURL+"=postgres://") {
				t.Fatalf("Find = %v; want an error saying %q and how to provide a server", err, c.want)
			}
		})
	}
}

// The default launcher is `go run ./txinboxtest/cmd/txinbox-testpg` in the root of txinbox's module.
func TestDefaultLauncherRunsTxinboxTestpg(t *testing.T) {
	l, err := testdb.DefaultLauncher()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(l.Command, " "); got != "go run ./txinboxtest/cmd/txinbox-testpg" {
		t.Errorf("Command = %q", got)
	}
	b, err := os.ReadFile(filepath.Join(l.Dir, "go.mod"))
	if err != nil || !strings.Contains(string(b), "module github.com/txinbox/txinbox\n") {
		t.Fatalf("Dir %s is not txinbox's module: %v", l.Dir, err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir, "txinboxtest", "cmd", "txinbox-testpg", "main.go")); err != nil {
		t.Fatal(err)
	}
}

// Docker counts as available when DOCKER_HOST is set or a socket exists where engines put it.
func TestDockerAvailable(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_RUNTIME_DIR", dir)
	t.Setenv("DOCKER_HOST", "tcp://docker.example:2375")
	if err := testdb.DockerAvailable(); err != nil {
		t.Errorf("with DOCKER_HOST set: %v", err)
	}
	t.Setenv("DOCKER_HOST", "")
	if _, err := os.Stat("/var/run/docker.sock"); err != nil {
		err := testdb.DockerAvailable()
		if err == nil || !strings.Contains(err.Error(), "DOCKER_HOST") {
			t.Errorf("with no DOCKER_HOST and no socket: %v; want an error naming DOCKER_HOST", err)
		}
	}
	l, err := net.Listen("unix", filepath.Join(dir, "docker.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := testdb.DockerAvailable(); err != nil {
		t.Errorf("with $XDG_RUNTIME_DIR/docker.sock: %v", err)
	}
}
