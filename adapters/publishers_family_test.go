package adapters_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	outboxImport  = "github.com/txinbox/txinbox/outbox"
	pubtestImport = "github.com/txinbox/txinbox/adapters/internal/pubtest"
)

// TestEveryPublisherChecksAcknowledgment keeps the outbox publishers' guarantees tested for every
// publisher, present and future: it walks this module and, for each package outside internal/ whose
// code declares a Publisher (a method Publish taking a []outbox.Event), fails unless a Test function
// of that package calls pubtest.Acknowledgment (an event the broker refuses is retried, never
// recorded as sent), one calls pubtest.Deliver (committed events arrive under their ids, in order per
// key, in a CloudEvents envelope that the CloudEvents SDK reads: id, source, type, time,
// datacontenttype, partitionkey, trace context; rolled-back ones never), one calls pubtest.ContextEnd
// (when a call's ctx ends part-way, the events the broker did not acknowledge fail with ctx's error,
// never recorded as sent) and one calls pubtest.Pair (the package's own sink, given only where to
// store, takes each event's id, kind, ordering key and trace context from the envelope).
func TestEveryPublisherChecksAcknowledgment(t *testing.T) {
	t.Parallel()
	var found []string
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); dir != "." && (name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		types := publishers(t, dir)
		if len(types) == 0 {
			return nil
		}
		pkg := filepath.ToSlash(dir)
		found = append(found, pkg+" ("+strings.Join(types, ", ")+")")
		for _, fn := range []string{"Acknowledgment", "Deliver", "ContextEnd", "Pair"} {
			if !testCalls(t, dir, pubtestImport, fn) {
				t.Errorf("package %s declares the outbox publisher %s but no Test function calls pubtest.%s",
					pkg, strings.Join(types, ", "), fn)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no publisher found: the walk is broken")
	}
	slices.Sort(found)
	t.Logf("publishers: %s", strings.Join(found, "; "))
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
