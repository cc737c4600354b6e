package txinbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
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

// testKitOnly are those of heavy that txinbox's go.mod names, for the test kit alone: testcontainers
// and the Docker client it needs, which only package txinboxtest/pgcontainer imports (the last
// choice of txinboxtest's harness, and the command txinboxtest/cmd/txinbox-testpg).
var testKitOnly = []string{"testcontainers", "docker", "moby"}

// isTestKitOnly reports whether the module path m is one of testKitOnly's.
func isTestKitOnly(m string) bool {
	for _, h := range testKitOnly {
		if strings.Contains(strings.ToLower(m), h) {
			return true
		}
	}
	return false
}

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

// checkGraph checks `go mod graph` in dir: the module itself requires no heavy module (unless it is
// txinbox, which requires testcontainers and Docker's client for its test kit, and nothing else
// heavy), and no module but txinbox and testcontainers' own requires testcontainers. (Other modules'
// own requirements are listed as they are: goose's go.mod names Docker's client for goose's own tests,
// which no txinbox user builds, downloads or records in go.sum.)
func checkGraph(t *testing.T, dir, self string) {
	t.Helper()
	const core = "github.com/txinbox/txinbox"
	graph := goCmd(t, dir, "mod", "graph")
	if len(graph) == 0 || len(graph)%2 != 0 {
		t.Fatalf("go mod graph printed %d fields, want pairs", len(graph))
	}
	for i := 0; i < len(graph); i += 2 {
		from, to := graph[i], graph[i+1]
		mod, _, _ := strings.Cut(from, "@")
		switch {
		case mod == core && len(heavyIn([]string{to})) > 0 && !isTestKitOnly(to),
			mod == self && mod != core && len(heavyIn([]string{to})) > 0,
			strings.Contains(to, "testcontainers") && mod != core && !strings.Contains(mod, "testcontainers"):
			t.Errorf("go mod graph of %s: %s requires %s", self, from, to)
		}
	}
}

// A program that imports only inbox and worker builds from txinbox's core, pgx and golang-lru (the
// seen-key cache): goose comes only with package migrate, OpenTelemetry only with package txotel.
// `go list -deps` has no testcontainers, Docker, broker client or OpenTelemetry, and neither have
// the go.mod and go.sum that `go mod tidy` writes for it (the module cache serves the modules): the
// tests of inbox and worker, whose modules go.sum records too, find a container through the command
// txinbox-testpg, never linking testcontainers.
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
	for _, want := range []string{"github.com/jackc/pgx/v5",
		"github.com/txinbox/txinbox/inbox", "github.com/txinbox/txinbox/worker"} {
		if !slices.Contains(deps, want) {
			t.Errorf("go list -deps lacks %s: the listing is not what this test expects", want)
		}
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "go.opentelemetry.io/") {
			t.Errorf("go list -deps of a program importing inbox and worker has %s: tracing belongs to package txotel", d)
			break
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if bad := heavyIn(readFields(t, filepath.Join(dir, f))); len(bad) > 0 {
			t.Errorf("the user's %s has %v", f, bad)
		}
	}
	checkGraph(t, dir, "example.com/user")
}

// The core module's own go.mod and go.sum name no broker or Redis module (the modules that need them,
// adapters, seenredis, chaos, bench, examples/ledger and examples/notifier, are apart), and of the
// Docker world only testcontainers and the Docker client it needs, for the test kit; and within the
// module only txinboxtest/pgcontainer imports testcontainers, and only txinboxtest and the
// command txinbox-testpg depend on it: the tests of txinbox's other packages find their container
// through that command.
func TestCoreModuleHasNoBrokerAndDockerOnlyInTheKit(t *testing.T) {
	for _, f := range []string{"go.mod", "go.sum"} {
		for _, m := range heavyIn(readFields(t, f)) {
			if !isTestKitOnly(m) {
				t.Errorf("the core's %s has %s", f, m)
			}
		}
	}
	checkGraph(t, ".", "github.com/txinbox/txinbox")

	const self = "github.com/txinbox/txinbox"
	allowed := map[string]bool{self + "/txinboxtest/pgcontainer": true, self + "/txinboxtest": true,
		self + "/txinboxtest/cmd/txinbox-testpg": true}
	checked := 0
	cmd := exec.Command("go", "list", "-test", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .Deps " "}}`, "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		path, rest, _ := strings.Cut(strings.TrimSpace(line), "|")
		imports, deps, _ := strings.Cut(rest, "|")
		checked++
		// A test of an allowed package (txinboxtest [txinboxtest.test], its external test package)
		// is allowed with it.
		base, _, _ := strings.Cut(path, " ")
		base = strings.TrimSuffix(strings.TrimSuffix(base, ".test"), "_test")
		for _, imp := range strings.Fields(imports) {
			if strings.Contains(imp, "testcontainers") && path != self+"/txinboxtest/pgcontainer" {
				t.Errorf("package %s imports %s: only txinboxtest/pgcontainer may", path, imp)
			}
		}
		if allowed[base] {
			continue
		}
		for _, d := range strings.Fields(deps) {
			if strings.Contains(d, "testcontainers") {
				t.Errorf("package %s depends on %s: only txinboxtest and txinbox-testpg may link testcontainers "+
					"(the tests of txinbox's packages start their container through txinbox-testpg)", path, d)
				break
			}
		}
	}
	if checked < 50 {
		t.Fatalf("go list listed %d packages: the check is broken", checked)
	}
}

// TestInternalIsTheBottomLayer keeps internal/ under every other package of the module, the root
// package included (ARCHITECTURE.md, "Packages"): no non-test file of a package under internal/
// imports a package of txinbox outside internal/, so that the folders, taken as units, import each
// other without a cycle. (Tests of internal packages may import the rest: they build apart.)
func TestInternalIsTheBottomLayer(t *testing.T) {
	const self = "github.com/txinbox/txinbox"
	listed := goCmd(t, ".", "list", "-f", `{{.ImportPath}}|{{join .Imports "|"}}`, "./internal/...")
	if len(listed) < 10 {
		t.Fatalf("go list ./internal/... listed %d packages: the check is broken", len(listed))
	}
	for _, line := range listed {
		path, imports, _ := strings.Cut(line, "|")
		for _, imp := range strings.Split(imports, "|") {
			if (imp == self || strings.HasPrefix(imp, self+"/")) && !strings.HasPrefix(imp, self+"/internal/") {
				t.Errorf("package %s imports %s: a package under internal/ imports only the standard library, "+
					"other modules and packages under internal/", path, imp)
			}
		}
	}
}

// moduleGroups names the modules beyond the standard library that txinbox's packages may need, in
// the groups ARCHITECTURE.md names them by (a module may be in several groups).
var moduleGroups = map[string][]string{
	"pgx": {"github.com/jackc/pgx/v5", "github.com/jackc/pgpassfile", "github.com/jackc/pgservicefile",
		"github.com/jackc/puddle/v2", "golang.org/x/text", "golang.org/x/sync"},
	"golang-lru": {"github.com/hashicorp/golang-lru/v2"},
	"OpenTelemetry": {"go.opentelemetry.io/otel", "go.opentelemetry.io/otel/metric", "go.opentelemetry.io/otel/trace",
		"go.opentelemetry.io/auto/sdk", "github.com/go-logr/logr", "github.com/go-logr/stdr", "github.com/cespare/xxhash/v2"},
	"Prometheus": {"github.com/prometheus/client_golang", "github.com/prometheus/client_model",
		"github.com/prometheus/common", "github.com/prometheus/procfs", "github.com/beorn7/perks",
		"github.com/munnerz/goautoneg", "google.golang.org/protobuf", "golang.org/x/sys", "github.com/cespare/xxhash/v2"},
	"goose": {"github.com/pressly/goose/v3", "github.com/mfridman/interpolate", "github.com/sethvargo/go-retry",
		"go.uber.org/multierr"},
	// "testcontainers" is testcontainers-go and every module it depends on: TestArchitectureDependencies
	// fills it from `go list -deps` of txinboxtest/pgcontainer, the one package importing it.
}

// allowedGroups is ARCHITECTURE.md's list of the module groups each public package of the root
// module (and the command) may depend on, directly or not.
var allowedGroups = map[string][]string{
	"":            {"pgx"},
	"seen":        {"pgx", "golang-lru"},
	"inbox":       {"pgx", "golang-lru"},
	"worker":      {"pgx"},
	"maintain":    {"pgx"},
	"retention":   {"pgx"},
	"idempotency": {"pgx"},
	"outbox":      {"pgx"},
	"migrate":     {"pgx", "goose"},
	"migrations":  {},
	"admin":       {"pgx", "golang-lru"},
	"console":     {"pgx", "golang-lru"},
	"metrics":     {"pgx", "Prometheus"},
	"txotel":      {"pgx", "OpenTelemetry"},
	"runner":      {"pgx"},
	"cmd/txinbox": {"pgx", "golang-lru", "goose"},
	"txinboxtest": {"pgx", "goose", "testcontainers"},
}

// listedPackage is what TestArchitectureDependencies reads of `go list -deps -json`.
type listedPackage struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

// TestArchitectureDependencies keeps ARCHITECTURE.md's "Packages" section true: for each public
// package of the root module (and cmd/txinbox), the txinbox packages it imports are the ones its
// arrow line lists (leaving out the root, internal/schemasql and internal/sqlc, which the section
// names once), and every module beyond the standard library it depends on, directly or not, is in a
// group allowedGroups (the section's module list) allows it.
func TestArchitectureDependencies(t *testing.T) {
	const self = "github.com/txinbox/txinbox"
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listedPackage{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	arrows := architectureArrows(t)
	groups := maps.Clone(moduleGroups)
	for _, d := range pkgs[self+"/txinboxtest/pgcontainer"].Deps {
		if m := pkgs[d].Module; m != nil && m.Path != self {
			groups["testcontainers"] = append(groups["testcontainers"], m.Path)
		}
	}
	if !slices.Contains(groups["testcontainers"], "github.com/testcontainers/testcontainers-go") {
		t.Fatalf("go list -deps of txinboxtest/pgcontainer has no testcontainers-go: the check is broken")
	}

	for name, groupNames := range allowedGroups {
		path := strings.TrimSuffix(self+"/"+name, "/")
		p, ok := pkgs[path]
		if !ok {
			t.Errorf("%s: not in go list ./... (allowedGroups and ARCHITECTURE.md list it)", path)
			continue
		}
		allowed := map[string]bool{}
		for _, g := range groupNames {
			for _, m := range groups[g] {
				allowed[m] = true
			}
		}
		reported := map[string]bool{}
		for _, d := range p.Deps {
			dp := pkgs[d]
			if dp.Standard || dp.Module == nil || dp.Module.Path == self || allowed[dp.Module.Path] || reported[dp.Module.Path] {
				continue
			}
			reported[dp.Module.Path] = true
			t.Errorf("package %s now depends on module %s (through %s), which ARCHITECTURE.md (\"Packages\": "+
				"the modules each package may need) does not allow it: drop the dependency, or update ARCHITECTURE.md "+
				"and allowedGroups in deps_test.go", path, dp.Module.Path, d)
		}

		show := name
		if show == "" {
			show = "txinbox"
		}
		var imports []string
		for _, imp := range p.Imports {
			rel, ok := strings.CutPrefix(imp, self+"/")
			if !ok || rel == "internal/schemasql" || rel == "internal/sqlc" {
				continue
			}
			imports = append(imports, rel)
		}
		slices.Sort(imports)
		documented, ok := arrows[show]
		if !ok {
			t.Errorf("ARCHITECTURE.md (\"Packages\") has no arrow line for %s; it imports %v", show, imports)
			continue
		}
		for _, imp := range imports {
			if !slices.Contains(documented, imp) {
				t.Errorf("package %s imports %s, which its arrow line in ARCHITECTURE.md does not list", show, imp)
			}
		}
		for _, d := range documented {
			if !slices.Contains(imports, d) {
				t.Errorf("ARCHITECTURE.md draws %s → %s, but %s does not import it", show, d, show)
			}
		}
	}
	for name := range arrows {
		key := name
		if key == "txinbox" {
			key = ""
		}
		if _, ok := allowedGroups[key]; !ok {
			t.Errorf("ARCHITECTURE.md has an arrow line for %s, which this test does not know", name)
		}
	}
}

// architectureArrows reads the arrow lines of the first code block of ARCHITECTURE.md's "Packages"
// section: "name → a, b (remark), c      (remark)", "-" for none.
func architectureArrows(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Packages\n")
	if !ok {
		t.Fatal(`ARCHITECTURE.md has no "## Packages" section`)
	}
	_, block, ok := strings.Cut(section, "\n```\n")
	block, _, ok2 := strings.Cut(block, "\n```")
	if !ok || !ok2 {
		t.Fatal(`ARCHITECTURE.md's "Packages" section has no code block`)
	}
	arrows := map[string][]string{}
	for _, line := range strings.Split(block, "\n") {
		name, rest, ok := strings.Cut(line, "→")
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut(rest, "      ") // a remark after wide space
		var list []string
		for _, e := range strings.Split(rest, ",") {
			e = strings.TrimSpace(e)
			if e != "-" && e != "" {
				list = append(list, e)
			}
		}
		arrows[strings.TrimSpace(name)] = list
	}
	return arrows
}
