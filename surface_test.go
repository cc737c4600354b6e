package txinbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// surface is the size of the core's public API: the exported identifiers of the core packages
// (top-level types, functions, variables and constants, and the exported methods of exported types),
// the exported fields of their configuration types (exported struct types named ...Config or
// ...Options) and their exported Default... values.
type surface struct {
	packages, identifiers, configFields, defaults int
}

// corePackages lists the core's public packages: every package of the root module but the commands,
// the examples, the internal packages and the test kit txinboxtest.
func corePackages(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, dir := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(dir, root), string(os.PathSeparator))
		first, _, _ := strings.Cut(rel, string(os.PathSeparator))
		switch first {
		case "cmd", "examples", "internal", "txinboxtest", "tools":
			continue
		}
		dirs = append(dirs, dir)
	}
	return dirs
}

// measure counts the surface of the packages in dirs (their non-test files).
func measure(t *testing.T, dirs []string) surface {
	t.Helper()
	s := surface{packages: len(dirs)}
	for _, dir := range dirs {
		fset := token.NewFileSet()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []*ast.File
		for _, e := range entries {
			if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
				f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
		}
		for _, f := range files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Name.IsExported() && (d.Recv == nil || exportedReceiver(d.Recv.List[0].Type)) {
						s.identifiers++
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch spec := spec.(type) {
						case *ast.TypeSpec:
							if !spec.Name.IsExported() {
								continue
							}
							s.identifiers++
							st, ok := spec.Type.(*ast.StructType)
							if ok && (strings.HasSuffix(spec.Name.Name, "Config") || strings.HasSuffix(spec.Name.Name, "Options")) {
								for _, field := range st.Fields.List {
									for _, n := range field.Names {
										if n.IsExported() {
											s.configFields++
										}
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range spec.Names {
								if n.IsExported() {
									s.identifiers++
									if strings.HasPrefix(n.Name, "Default") {
										s.defaults++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return s
}

// exportedReceiver reports whether a method's receiver type is exported.
func exportedReceiver(e ast.Expr) bool {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return true
		}
	}
}

// surfaceLine is the sentence of ARCHITECTURE.md that states the surface.
var surfaceLine = regexp.MustCompile(`The core's public surface: (\d+) packages, (\d+) exported identifiers, (\d+) fields of configuration types, (\d+) exported Default`)

// TestPublicSurface keeps ARCHITECTURE.md's count of the public surface true, and the surface within
// its bounds: at most 300 exported identifiers, 80 configuration fields and 10 Default... values.
func TestPublicSurface(t *testing.T) {
	got := measure(t, corePackages(t))
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	m := surfaceLine.FindStringSubmatch(strings.Join(strings.Fields(string(b)), " "))
	if m == nil {
		t.Fatalf("ARCHITECTURE.md has no sentence %q", surfaceLine)
	}
	var doc surface
	for i, p := range []*int{&doc.packages, &doc.identifiers, &doc.configFields, &doc.defaults} {
		*p, _ = strconv.Atoi(m[i+1])
	}
	if doc != got {
		t.Errorf("ARCHITECTURE.md states %+v; the code has %+v: update the sentence", doc, got)
	}
	for _, c := range []struct {
		name     string
		n, limit int
	}{{"exported identifiers", got.identifiers, 300}, {"configuration fields", got.configFields, 80}, {"Default... values", got.defaults, 10}} {
		if c.n > c.limit {
			t.Errorf("%d %s in the core's public packages: more than %d", c.n, c.name, c.limit)
		}
	}
}
