package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// makeVar returns the value the Makefile gives its variable name (a line NAME := value, = or ?=).
func makeVar(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*[:?]?=\s*(.*?)\s*$`)
	m := re.FindSubmatch(b)
	if m == nil || len(m[1]) == 0 {
		t.Fatalf("the Makefile gives no value to %s", name)
	}
	return string(m[1])
}

// shellCommands returns the commands of a shell block, a line continued by a final backslash joined
// to the next one, each with the line it starts on.
func shellCommands(b block) (cmds []string, lines []int) {
	var cur strings.Builder
	start := 0
	for i, l := range strings.Split(b.code, "\n") {
		if cur.Len() == 0 {
			start = b.line + i
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		if c := strings.TrimSpace(cur.String()); c != "" {
			cmds, lines = append(cmds, c), append(lines, start)
		}
		cur.Reset()
	}
	return cmds, lines
}

// markdownFiles returns the repository's Markdown files.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range projectFiles(t, repoRoot) {
		if _, err := os.Stat(filepath.Join(repoRoot, f)); err == nil && strings.HasSuffix(f, ".md") {
			out = append(out, f)
		}
	}
	return out
}

// requiredVersion returns the version of module that the go.mod of dir (relative to the root)
// requires.
func requiredVersion(t *testing.T, dir, module string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s/go.mod requires no %s", dir, module)
	}
	return string(m[1])
}

// The goose CLI the documents install is the one the Makefile builds: the version pinned in
// tools/goose/go.mod, with the Makefile's GOOSE_TAGS, which leave out the drivers of other databases
// (a plain install compiles ClickHouse, libSQL, SQL Server, ... for minutes).
func TestGooseInstallCarriesTheMakefilesTags(t *testing.T) {
	t.Parallel()
	const goose = "github.com/pressly/goose/v3"
	tags := makeVar(t, "GOOSE_TAGS")
	version := requiredVersion(t, "tools/goose", goose)
	tagsFlag := regexp.MustCompile(`\s-tags[= ](\S+)`)
	found := 0
	for _, doc := range markdownFiles(t) {
		for _, b := range fencedBlocks(t, doc, "sh") {
			cmds, lines := shellCommands(b)
			for i, c := range cmds {
				if !strings.Contains(c, "go install") || !strings.Contains(c, goose+"/cmd/goose") {
					continue
				}
				found++
				if m := tagsFlag.FindStringSubmatch(c); m == nil || strings.Trim(m[1], `'"`) != tags {
					t.Errorf("%s:%d: %q: want -tags %s (the Makefile's GOOSE_TAGS)", doc, lines[i], c, tags)
				}
				if !strings.Contains(c, goose+"/cmd/goose@"+version) {
					t.Errorf("%s:%d: %q: want goose@%s (tools/goose/go.mod)", doc, lines[i], c, version)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no document installs the goose CLI (docs/migrations.md did)")
	}
}

// moduleOf returns the module path and directory (relative to the root) of the repository's module
// that holds the package of import path pkg, which is under modulePath.
func moduleOf(t *testing.T, pkg string) (path, dir string) {
	t.Helper()
	dir = filepath.Clean("./" + strings.TrimPrefix(pkg, modulePath))
	for {
		if b, err := os.ReadFile(filepath.Join(repoRoot, dir, "go.mod")); err == nil {
			m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(b)
			if m == nil {
				t.Fatalf("%s/go.mod has no module line", dir)
			}
			return string(m[1]), dir
		}
		if dir == "." {
			t.Fatalf("no go.mod holds %s", pkg)
		}
		dir = filepath.Dir(dir)
	}
}

// README.md's Install section gets every module of the repository whose packages the documents teach
// (those their Go blocks may import), and only modules of the repository.
func TestInstallGetsEveryDocumentedModule(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n## Install\n")
	if !ok {
		t.Fatal("README.md has no section ## Install")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	goGet := regexp.MustCompile(`(?m)^go get (\S+)@latest\b`)
	var got []string
	for _, m := range goGet.FindAllStringSubmatch(section, -1) {
		got = append(got, m[1])
	}
	var want []string
	for _, pkg := range imports {
		if pkg != modulePath && !strings.HasPrefix(pkg, modulePath+"/") {
			continue
		}
		if path, _ := moduleOf(t, pkg); !slices.Contains(want, path) {
			want = append(want, path)
		}
	}
	for _, path := range want {
		if !slices.Contains(got, path) {
			t.Errorf("README.md's Install section has no `go get %s@latest` (the documents teach its packages)", path)
		}
	}
	for _, path := range got {
		if p, _ := moduleOf(t, path); p != path {
			t.Errorf("README.md's Install section gets %s, which is not a module of the repository", path)
		}
	}
	if len(got) == 0 {
		t.Fatal("README.md's Install section has no `go get ...@latest` line")
	}
}
