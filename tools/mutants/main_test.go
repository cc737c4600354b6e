package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSplitModule: a test: package inside a nested module (a directory with its own go.mod) is run in
// that module's directory, with its path relative to it; any other package in the root.
func TestSplitModule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, d := range []string{"inbox", "adapters/rabbitmq", "adapters/internal/run", "tools/mutants"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{".", "adapters", "tools/mutants"} {
		if err := os.WriteFile(filepath.Join(dir, m, "go.mod"), []byte("module x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ pkg, mod, rel string }{
		{"./inbox", ".", "./inbox"},
		{"./...", ".", "./..."},
		{"./inbox/...", ".", "./inbox/..."},
		{"./adapters", "adapters", "."},
		{"./adapters/", "adapters", "."},
		{"./adapters/rabbitmq", "adapters", "./rabbitmq"},
		{"./adapters/internal/run", "adapters", "./internal/run"},
		{"./adapters/...", "adapters", "./..."},
		{"./adapters/internal/...", "adapters", "./internal/..."},
		{"./tools/mutants", filepath.FromSlash("tools/mutants"), "."},
	} {
		mod, rel := splitModule(dir, tc.pkg)
		if mod != tc.mod || rel != tc.rel {
			t.Errorf("splitModule(%q) = %q, %q; want %q, %q", tc.pkg, mod, rel, tc.mod, tc.rel)
		}
	}
}

// TestListParses parses the curated list.
func TestListParses(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("mutants.txt")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no mutant in mutants.txt")
	}
}

// TestListApplies checks the curated list against the repository (../../): every mutant's files
// exist, each search text occurs exactly once where the mutant's edits before it have left the file
// (as runMutant applies them), and every test: package is a directory. A rename or a move that
// leaves the list behind fails here, not only in a full `make mutants` run.
func TestListApplies(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	text, err := os.ReadFile("mutants.txt")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		files := map[string]string{}
		for _, e := range m.Edits {
			b, ok := files[e.File]
			if !ok {
				raw, err := os.ReadFile(filepath.Join(root, e.File))
				if err != nil {
					t.Errorf("mutants.txt:%d (%s): %v", m.Line, m.Name, err)
					break
				}
				b = string(raw)
			}
			if n := strings.Count(b, e.Search); n != 1 {
				t.Errorf("mutants.txt:%d (%s): %s: search text found %d times, want exactly once: %q",
					m.Line, m.Name, e.File, n, firstLine(e.Search))
				break
			}
			files[e.File] = strings.Replace(b, e.Search, e.Replace, 1)
		}
		for _, g := range m.Tests {
			if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(g.Pkg))); err != nil || !fi.IsDir() {
				t.Errorf("mutants.txt:%d (%s): test package %s is not a directory", m.Line, m.Name, g.Pkg)
			}
		}
	}
}

// functionDef finds the SQL functions a migration's text defines (CREATE [OR REPLACE] FUNCTION name).
var functionDef = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)\s*\(`)

// TestMigrationMutantsEditTheLiveDefinition: a mutant of an SQL function in a migration edits the
// definition that a migrated schema runs, the one in the newest migration whose up section defines
// it. A mutant of a definition that a later migration replaces (CREATE OR REPLACE FUNCTION) changes
// nothing that runs, and survives whatever the tests do.
func TestMigrationMutantsEditTheLiveDefinition(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	text, err := os.ReadFile("mutants.txt")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	migrations, err := filepath.Glob(filepath.Join(root, "migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	up := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := strings.Cut(string(b), "-- +goose Down")
		return s
	}
	for _, m := range ms {
		for _, e := range m.Edits {
			if !strings.HasPrefix(e.File, "migrations/") || !strings.HasSuffix(e.File, ".sql") {
				continue
			}
			s := up(filepath.Join(root, e.File))
			i := strings.Index(s, e.Search)
			if i < 0 {
				continue // in the down section, or not found (TestListApplies says so)
			}
			defs := functionDef.FindAllStringSubmatch(s[:i], -1)
			if defs == nil {
				continue // not inside a function
			}
			fn := defs[len(defs)-1][1]
			for _, later := range migrations {
				if filepath.Base(later) <= filepath.Base(e.File) {
					continue
				}
				for _, d := range functionDef.FindAllStringSubmatch(up(later), -1) {
					if strings.EqualFold(d[1], fn) {
						t.Errorf("mutants.txt:%d (%s) edits function %s in %s, which %s defines again: edit the newest definition",
							m.Line, m.Name, fn, e.File, filepath.Base(later))
					}
				}
			}
		}
	}
}
