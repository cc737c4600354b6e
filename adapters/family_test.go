package adapters_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	sinkImport        = "github.com/txinbox/txinbox/adapters"
	adaptertestImport = "github.com/txinbox/txinbox/adapters/internal/adaptertest"
	chaintestImport   = "github.com/txinbox/txinbox/adapters/internal/chaintest"
)

// sharedChecks are the checks every adapter package runs from a Test function of its own, and what
// stays unchecked without them.
var sharedChecks = []struct{ importPath, fn, name, unchecked string }{
	{adaptertestImport, "CommitFailure", "adaptertest.CommitFailure",
		"nothing checks that it acknowledges only what the inbox committed"},
	{adaptertestImport, "StoreFailureKeepsOrder", "adaptertest.StoreFailureKeepsOrder",
		"nothing checks that a batch it cannot store is held and stored before the messages behind it"},
	{chaintestImport, "Run", "chaintest.Run",
		"nothing checks it as the link between two services whose processes are SIGKILLed (exactly once, per-key order)"},
}

// TestEveryAdapterRunsTheSharedChecks keeps the adapters' shared guarantees tested for every broker
// adapter, present and future: it walks this module and fails for each adapter package (a package
// outside internal/ whose code imports this package, the Sink's) without a Test function calling
// each shared check: adaptertest.CommitFailure (the adapter against its broker while the inbox
// commit fails: it acknowledges only what is stored), adaptertest.StoreFailureKeepsOrder (a batch it
// cannot store is held, and stored before the messages behind it) and chaintest.Run (the adapter
// between two services whose processes are SIGKILLed: every event applied once, each key in order).
func TestEveryAdapterRunsTheSharedChecks(t *testing.T) {
	t.Parallel()
	var found []string
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); dir != "." && (name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if dir == "." || !isAdapter(t, dir) {
			return nil
		}
		found = append(found, filepath.ToSlash(dir))
		for _, c := range sharedChecks {
			if !testCalls(t, dir, c.importPath, c.fn) {
				t.Errorf("adapter package %s has no Test function calling %s: %s", filepath.ToSlash(dir), c.name, c.unchecked)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no adapter package found: the walk is broken")
	}
	slices.Sort(found)
	t.Logf("adapters: %s", strings.Join(found, ", "))
}

// isAdapter reports whether the code (not the tests) of the package in dir imports the Sink's package.
func isAdapter(t *testing.T, dir string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		if importName(af, sinkImport) != "" {
			return true
		}
	}
	return false
}

// testCalls reports whether a test file in dir has a Test function that calls the function fn of the
// package importPath.
func testCalls(t *testing.T, dir, importPath, fn string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg := importName(af, importPath)
		if pkg == "" {
			continue
		}
		for _, decl := range af.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil || !strings.HasPrefix(fd.Name.Name, "Test") {
				continue
			}
			calls := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == fn {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
							calls = true
						}
					}
				}
				return !calls
			})
			if calls {
				return true
			}
		}
	}
	return false
}

// importName returns the name under which f imports path ("" if it does not).
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err != nil || p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}
