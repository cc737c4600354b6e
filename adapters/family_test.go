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
	outboxImport      = "github.com/txinbox/txinbox/outbox"
	conformanceImport = "github.com/txinbox/txinbox/adapters/conformance"
	chaintestImport   = "github.com/txinbox/txinbox/adapters/internal/chaintest"
)

// sharedChecks are the checks every adapter package runs from a Test function of its own, and what
// stays unchecked without them.
var sharedChecks = []struct{ importPath, fn, name, unchecked string }{
	{conformanceImport, "Run", "conformance.Run",
		"nothing checks its publisher and its sink against the conformance suite (delivery in an envelope, " +
			"acknowledgment, a ctx that ends part-way, the pair of publisher and sink, a failed commit, a failed store's order)"},
	{chaintestImport, "Run", "chaintest.Run",
		"nothing checks it as the link between two services whose processes are SIGKILLed (exactly once, per-key order)"},
}

// TestEveryAdapterRunsTheSharedChecks keeps the adapters' shared guarantees tested for every broker
// adapter, present and future: it walks this module and fails for each adapter package (a package
// outside internal/ and conformance/ whose code imports this package, the Sink's, or declares an
// outbox publisher: a method Publish taking a []outbox.Event) without a Test function calling each
// shared check: conformance.Run (the public conformance suite: its publisher and its sink against its
// broker) and chaintest.Run (the adapter between two services whose processes are SIGKILLed: every
// event applied once, each key in order).
func TestEveryAdapterRunsTheSharedChecks(t *testing.T) {
	t.Parallel()
	var found []string
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); dir != "." && (name == "internal" || name == "conformance" || name == "testdata" ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if dir == "." || !isAdapter(t, dir) && len(publishers(t, dir)) == 0 {
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

// publishers returns the types that the code (not the tests) of the package in dir gives a method
// Publish with a parameter of type []outbox.Event: outbox publishers.
func publishers(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg := importName(af, outboxImport)
		if pkg == "" {
			continue
		}
		for _, decl := range af.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != "Publish" || !takesEvents(fd, pkg) {
				continue
			}
			types = append(types, receiverType(fd))
		}
	}
	return types
}

// takesEvents reports whether fd has a parameter of type []pkg.Event.
func takesEvents(fd *ast.FuncDecl, pkg string) bool {
	for _, p := range fd.Type.Params.List {
		at, ok := p.Type.(*ast.ArrayType)
		if !ok || at.Len != nil {
			continue
		}
		if sel, ok := at.Elt.(*ast.SelectorExpr); ok && sel.Sel.Name == "Event" {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
				return true
			}
		}
	}
	return false
}

// receiverType returns the name of fd's receiver type.
func receiverType(fd *ast.FuncDecl) string {
	typ := fd.Recv.List[0].Type
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}
