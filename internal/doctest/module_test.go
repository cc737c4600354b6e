package doctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath is the module path of the repository's root module.
const modulePath = "github.com/txinbox/txinbox"

// goEnv is the environment of the go commands run in a temporary module: the module proxy as this
// process has it configured, go.mod updated as needed, never a go.work of the surroundings.
func goEnv(extra ...string) []string {
	return append(append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off"), extra...)
}

// run runs a command in dir with env (nil: this process's) and returns its combined output; it fails
// t with that output when the command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// newAppModule creates an empty application module, example.com/app, in a temporary directory, that
// requires each of the repository's modules named (directories relative to the root: "." is
// github.com/txinbox/txinbox, "adapters" github.com/txinbox/txinbox/adapters, ...) from its
// directory here, through a replace directive: what `go get github.com/txinbox/txinbox@VERSION`
// gives a module user, with this tree's code and this tree's requirements (pgx's version among them)
// in the module graph before any import is resolved. It returns the module's directory.
func newAppModule(t *testing.T, modules ...string) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run(t, dir, goEnv(), "go", "mod", "init", "example.com/app")
	for _, m := range modules {
		path := modulePath
		if m != "." {
			path += "/" + m
		}
		run(t, dir, goEnv(), "go", "mod", "edit", "-replace", path+"="+filepath.Join(root, m),
			"-require", path+"@v0.0.0-00010101000000-000000000000")
	}
	return dir
}

// goCommand returns the go command with args, to run in dir with [goEnv].
func goCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, goEnv()
	return cmd
}
