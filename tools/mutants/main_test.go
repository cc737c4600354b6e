package main

import (
	"os"
	"path/filepath"
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

// TestListApplies: every edit of every mutant applies to the repository as it is: its file exists and
// its search text occurs exactly once there (after the mutant's earlier edits), so that code drifting
// away from the list fails here, in make test, not only in a make mutants run.
func TestListApplies(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("mutants.txt")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	for _, m := range ms {
		files := map[string]string{}
		for _, e := range m.Edits {
			s, ok := files[e.File]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, e.File))
				if err != nil {
					t.Errorf("mutant %s (mutants.txt line %d): %v", m.Name, m.Line, err)
					break
				}
				s = string(b)
			}
			if n := strings.Count(s, e.Search); n != 1 {
				t.Errorf("mutant %s (mutants.txt line %d): %s: search text found %d times, want exactly once: %q",
					m.Name, m.Line, filepath.ToSlash(e.File), n, firstLine(e.Search))
				break
			}
			files[e.File] = strings.Replace(s, e.Search, e.Replace, 1)
		}
	}
}
