package txinboxtest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// kitRoots returns the directories of the test kit: the public txinboxtest with its subpackages (the
// harness and fixtures it wraps, the helpers txinbox's own tests use), and the adapters' public
// conformance suite with the helpers it runs on.
func kitRoots() []string {
	return []string{".", "../adapters/conformance", "../adapters/internal/pubtest", "../adapters/internal/adaptertest"}
}

// TestKitHasNoMutablePackageState keeps the test kit free of package-level settings (a variable a
// test binary could set to change the kit, as a container starter once was): it walks every package
// under kitRoots and fails for each package-level variable, except one initialised once by
// regexp.MustCompile or sync.OnceValue(s)/OnceFunc (a compiled pattern; the memo of the chosen
// server) that nothing assigns again.
func TestKitHasNoMutablePackageState(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{"regexp.MustCompile": true, "sync.OnceValue": true, "sync.OnceValues": true, "sync.OnceFunc": true}
	pkgs := 0
	for _, root := range kitRoots() {
		err := filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			files, err := filepath.Glob(filepath.Join(dir, "*.go"))
			if err != nil {
				return err
			}
			var parsed []*ast.File
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
				if err != nil {
					return err
				}
				parsed = append(parsed, af)
			}
			if len(parsed) == 0 {
				return nil
			}
			pkgs++
			assigned := map[string]bool{}
			for _, af := range parsed {
				ast.Inspect(af, func(n ast.Node) bool {
					var lhs []ast.Expr
					switch s := n.(type) {
					case *ast.AssignStmt:
						if s.Tok != token.DEFINE { // := declares a new variable
							lhs = s.Lhs
						}
					case *ast.IncDecStmt:
						lhs = []ast.Expr{s.X}
					}
					for _, e := range lhs {
						if id, ok := e.(*ast.Ident); ok {
							assigned[id.Name] = true
						}
					}
					return true
				})
			}
			for _, af := range parsed {
				for _, decl := range af.Decls {
					gd, ok := decl.(*ast.GenDecl)
					if !ok || gd.Tok != token.VAR {
						continue
					}
					for _, spec := range gd.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, name := range vs.Names {
							if name.Name == "_" {
								continue
							}
							init := ""
							if i < len(vs.Values) {
								if c, ok := vs.Values[i].(*ast.CallExpr); ok {
									if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
										if pkg, ok := sel.X.(*ast.Ident); ok {
											init = pkg.Name + "." + sel.Sel.Name
										}
									}
								}
							}
							if !allowed[init] || assigned[name.Name] {
								t.Errorf("%s: package-level variable %s: the test kit keeps no package-level state that can change; "+
									"take it as an argument (or a field of the call's config)", filepath.ToSlash(dir), name.Name)
							}
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if pkgs < 9 {
		t.Fatalf("found %d packages of the kit: the walk is broken", pkgs)
	}
}
