package doctest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// discardedTxOK matches, in text (a document, a Go comment), a call of idempotency.Tx whose second
// result (ok) is assigned to the blank identifier (TestDiscardedTxOKCheck shows the forms).
var discardedTxOK = regexp.MustCompile(`\b\w+\s*,\s*_\s*:?=\s*idempotency\s*\.\s*Tx\s*\(`)

// discardedTxOKCalls returns the lines of the Go file src (named name) where idempotency.Tx's ok
// is discarded: in its code (the package imported under any name, or Tx itself inside package
// idempotency) and in its comments. A file that does not parse is read as text.
func discardedTxOKCalls(name string, src []byte) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return discardedTxOKLines(name, string(src), 1)
	}
	var out []string
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			out = append(out, discardedTxOKLines(name, c.Text, fset.Position(c.Pos()).Line)...)
		}
	}
	pkgName := "" // the name idempotency is imported under, if it is
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == modulePath+"/idempotency" {
			pkgName = "idempotency"
			if imp.Name != nil {
				pkgName = imp.Name.Name
			}
		}
	}
	isTx := func(e ast.Expr) bool {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return false
		}
		switch fun := call.Fun.(type) {
		case *ast.SelectorExpr:
			x, ok := fun.X.(*ast.Ident)
			return ok && pkgName != "" && x.Name == pkgName && fun.Sel.Name == "Tx"
		case *ast.Ident:
			return f.Name.Name == "idempotency" && fun.Name == "Tx"
		}
		return false
	}
	blank := func(e ast.Expr) bool { id, ok := e.(*ast.Ident); return ok && id.Name == "_" }
	report := func(n ast.Node) {
		p := fset.Position(n.Pos())
		out = append(out, fmt.Sprintf("%s:%d: %s", name, p.Line, strings.TrimSpace(strings.Split(string(src), "\n")[p.Line-1])))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			if len(s.Lhs) == 2 && len(s.Rhs) == 1 && isTx(s.Rhs[0]) && blank(s.Lhs[1]) {
				report(s)
			}
		case *ast.ValueSpec:
			if len(s.Names) == 2 && len(s.Values) == 1 && isTx(s.Values[0]) && s.Names[1].Name == "_" {
				report(s)
			}
		}
		return true
	})
	return out
}

// discardedTxOKLines returns the lines of text (whose first line is line first of the file name)
// that discardedTxOK matches, as "name:line: text".
func discardedTxOKLines(name, text string, first int) []string {
	var out []string
	for _, m := range discardedTxOK.FindAllStringIndex(text, -1) {
		line := first + strings.Count(text[:m[0]], "\n")
		start := strings.LastIndex(text[:m[0]], "\n") + 1
		end := strings.IndexByte(text[m[0]:], '\n')
		if end < 0 {
			end = len(text) - m[0]
		}
		out = append(out, fmt.Sprintf("%s:%d: %s", name, line, strings.TrimSpace(text[start:m[0]+end])))
	}
	return out
}

// No document, Go example, comment or code of the repository calls idempotency.Tx and discards its
// ok: outside the middleware (a route not wrapped by it, a test calling the handler directly) Tx
// returns a nil pgx.Tx and false, and a handler that ignores false panics on its first statement.
// Every Markdown file and every Go file (the examples, the package documentation, the tests) is
// read, as TestNoWorkItemReferences reads them (the files git knows of).
func TestIdempotencyTxOKIsNeverDiscarded(t *testing.T) {
	t.Parallel()
	var found []string
	docs, gos := 0, 0
	for _, f := range projectFiles(t, repoRoot) {
		isMD, isGo := strings.HasSuffix(f, ".md"), strings.HasSuffix(f, ".go")
		if !isMD && !isGo {
			continue
		}
		b, ok := readProjectFile(t, f)
		if !ok {
			continue
		}
		if isMD {
			docs++
			found = append(found, discardedTxOKLines(f, string(b), 1)...)
		} else {
			gos++
			found = append(found, discardedTxOKCalls(f, b)...)
		}
	}
	if docs == 0 || gos == 0 {
		t.Fatalf("read %d Markdown and %d Go files: the repository's files were not found", docs, gos)
	}
	if len(found) > 0 {
		t.Fatalf("%d calls of idempotency.Tx discard its ok (outside the middleware tx is nil: check ok, as docs/receiving.md does):\n%s",
			len(found), strings.Join(found, "\n"))
	}
}

// The check catches the discarded ok in code (under the package's name, an alias, or inside package
// idempotency), in comments and in documents, and lets a checked ok, a discarded tx and other
// functions named Tx pass.
func TestDiscardedTxOKCheck(t *testing.T) {
	t.Parallel()
	call := "idempotency" + ".Tx(r.Context())" // spelled apart, so that this file passes its own check
	imp := "import \"" + modulePath + "/idempotency\"\n"
	for _, bad := range []struct{ name, src string }{
		{"code", "package p\n" + imp + "func f() { tx, _ := " + call + "; _ = tx }\n"},
		{"assignment", "package p\n" + imp + "func f() { var tx any; tx, _ = " + call + "; _ = tx }\n"},
		{"var", "package p\n" + imp + "var tx, _ = " + call + "\n"},
		{"alias", "package p\nimport idem \"" + modulePath + "/idempotency\"\nfunc f() { tx, _ := idem.Tx(nil); _ = tx }\n"},
		{"inside the package", "package idempotency\nfunc f() { tx, _ := Tx(nil); _ = tx }\n"},
		{"comment", "package p\n// Use it so:\n//\n//\ttx, _ := " + call + "\nfunc f() {}\n"},
		{"no parse", "tx, _ := " + call},
	} {
		if got := discardedTxOKCalls(bad.name+".go", []byte(bad.src)); len(got) != 1 {
			t.Errorf("%s: found %q, want one call", bad.name, got)
		}
	}
	if got := discardedTxOKLines("doc.md", "text\n\n```go\ntx, _ := "+call+"\n```\n", 1); len(got) != 1 || !strings.HasPrefix(got[0], "doc.md:4:") {
		t.Errorf("document: found %q, want one call at line 4", got)
	}
	for _, good := range []struct{ name, src string }{
		{"ok checked", "package p\n" + imp + "func f() { tx, ok := " + call + "; _, _ = tx, ok }\n"},
		{"tx discarded", "package p\n" + imp + "func f() { _, ok := " + call + "; _ = ok }\n"},
		{"another Tx", "package p\nfunc f() { tx, _ := store.Tx(nil); _ = tx }\n"},
		{"Tx outside the package", "package p\nfunc f() { tx, _ := Tx(nil); _ = tx }\n"},
	} {
		if got := discardedTxOKCalls(good.name+".go", []byte(good.src)); len(got) != 0 {
			t.Errorf("%s: found %q, want none", good.name, got)
		}
	}
}
