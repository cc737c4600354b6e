package txinbox_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// heavy names what a program using txinbox's core must never pull in: the Docker world
// (testcontainers, which the test kit txinboxtest uses) and the broker clients (the adapters').
var heavy = []string{"testcontainers", "docker", "moby", "amqp", "nats", "kafka", "franz", "redis"}

// goCmd runs the go command in dir and returns its output's fields.
func goCmd(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		var stderr string
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return strings.Fields(string(out))
}

// heavyIn returns the fields of lines that name a heavy dependency.
func heavyIn(lines []string) []string {
	var bad []string
	for _, l := range lines {
		for _, h := range heavy {
			if strings.Contains(strings.ToLower(l), h) {
				bad = append(bad, l)
				break
			}
		}
	}
	return bad
}

func readFields(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// checkGraph checks `go mod graph` in dir: no testcontainers anywhere, and no heavy module required by
// the module itself or by txinbox. (Other modules' own requirements are listed as they are: goose's
// go.mod names Docker's client for goose's own tests, which no txinbox user builds, downloads or
// records in go.sum.)
func checkGraph(t *testing.T, dir, self string) {
	t.Helper()
	graph := goCmd(t, dir, "mod", "graph")
	if len(graph) == 0 || len(graph)%2 != 0 {
		t.Fatalf("go mod graph printed %d fields, want pairs", len(graph))
	}
	for i := 0; i < len(graph); i += 2 {
		from, to := graph[i], graph[i+1]
		mod, _, _ := strings.Cut(from, "@")
		if strings.Contains(to, "testcontainers") ||
			(mod == self || mod == "github.com/txinbox/txinbox") && len(heavyIn([]string{to})) > 0 {
			t.Errorf("go mod graph of %s: %s requires %s", self, from, to)
		}
	}
}

// A program that imports only inbox and worker builds from txinbox's core, pgx and OpenTelemetry
// (goose comes only with package migrate): `go list -deps` has no testcontainers, Docker or broker client, and neither have the
// go.mod and go.sum that `go mod tidy` writes for it (the module cache serves the modules).
func TestUserOfInboxAndWorkerGetsNoDockerOrBroker(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/user\n\ngo 1.26.0\n\nrequire github.com/txinbox/txinbox v0.0.0\n\n" +
			"replace github.com/txinbox/txinbox => " + root + "\n",
		"main.go": "package main\n\nimport (\n\t_ \"github.com/txinbox/txinbox/inbox\"\n\t_ \"github.com/txinbox/txinbox/worker\"\n)\n\nfunc main() {}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, "mod", "tidy")

	deps := goCmd(t, dir, "list", "-deps", "-test=false", ".")
	if bad := heavyIn(deps); len(bad) > 0 {
		t.Errorf("go list -deps of a program importing inbox and worker has %v", bad)
	}
	for _, want := range []string{"github.com/jackc/pgx/v5", "go.opentelemetry.io/otel",
		"github.com/txinbox/txinbox/inbox", "github.com/txinbox/txinbox/worker"} {
		if !slices.Contains(deps, want) {
			t.Errorf("go list -deps lacks %s: the listing is not what this test expects", want)
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if bad := heavyIn(readFields(t, filepath.Join(dir, f))); len(bad) > 0 {
			t.Errorf("the user's %s has %v", f, bad)
		}
	}
	checkGraph(t, dir, "example.com/user")
}

// The core module's own go.mod and go.sum, which its tests are built from too, name no testcontainers,
// Docker or broker module: internal/testkit/testdb finds a server without them, and the modules that need
// them (txinboxtest, adapters, seenredis, chaos, bench, examples/ledger) are apart.
func TestCoreModuleHasNoDockerOrBroker(t *testing.T) {
	for _, f := range []string{"go.mod", "go.sum"} {
		if bad := heavyIn(readFields(t, f)); len(bad) > 0 {
			t.Errorf("the core's %s has %v", f, bad)
		}
	}
	checkGraph(t, ".", "github.com/txinbox/txinbox")
}
