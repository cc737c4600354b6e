package main

import (
	"os"
	"path/filepath"
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
