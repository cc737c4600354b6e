package doctest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// pkgDirs maps the name of each of the repository's packages that the documents may name (those of
// [imports] under modulePath) to its directory, relative to the repository's root.
func pkgDirs() map[string]string {
	dirs := map[string]string{}
	for name, path := range imports {
		if path == modulePath {
			dirs[name] = "."
		} else if rest, ok := strings.CutPrefix(path, modulePath+"/"); ok {
			dirs[name] = rest
		}
	}
	return dirs
}

// pkgAPI is what a package declares: its top-level names, and for each type its methods and fields
// (those of the types it embeds included).
type pkgAPI struct {
	top      map[string]bool
	members  map[string]map[string]bool // type name -> method and field names
	embedded map[string][]ast.Expr      // type name -> the types it embeds
}

var (
	apiMu    sync.Mutex
	apiCache = map[string]*pkgAPI{}
)

// readAPI parses the non-test Go files of dir (relative to the repository's root).
func readAPI(t *testing.T, dir string) *pkgAPI {
	t.Helper()
	apiMu.Lock()
	defer apiMu.Unlock()
	if a, ok := apiCache[dir]; ok {
		return a
	}
	a := &pkgAPI{top: map[string]bool{}, members: map[string]map[string]bool{}, embedded: map[string][]ast.Expr{}}
	files, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	member := func(typ, name string) {
		if a.members[typ] == nil {
			a.members[typ] = map[string]bool{}
		}
		a.members[typ][name] = true
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					a.top[d.Name.Name] = true
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				switch r := recv.(type) {
				case *ast.IndexExpr:
					recv = r.X
				case *ast.IndexListExpr:
					recv = r.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					member(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							a.top[n.Name] = true
						}
					case *ast.TypeSpec:
						a.top[s.Name.Name] = true
						var fields *ast.FieldList
						switch ty := s.Type.(type) {
						case *ast.StructType:
							fields = ty.Fields
						case *ast.InterfaceType:
							fields = ty.Methods
						}
						if fields == nil {
							continue
						}
						for _, fl := range fields.List {
							for _, n := range fl.Names {
								member(s.Name.Name, n.Name)
							}
							if len(fl.Names) == 0 {
								a.embedded[s.Name.Name] = append(a.embedded[s.Name.Name], fl.Type)
							}
						}
					}
				}
			}
		}
	}
	apiCache[dir] = a
	return a
}

// hasMember reports whether type typ of the package in dir has the method or field name, directly or
// through a type it embeds (of its own package, or of another package of [pkgDirs]).
func hasMember(t *testing.T, dirs map[string]string, dir, typ, name string, depth int) bool {
	a := readAPI(t, dir)
	if a.members[typ][name] {
		return true
	}
	if depth > 5 {
		return false
	}
	for _, e := range a.embedded[typ] {
		if s, ok := e.(*ast.StarExpr); ok {
			e = s.X
		}
		switch e := e.(type) {
		case *ast.Ident:
			if e.Name == name || hasMember(t, dirs, dir, e.Name, name, depth+1) {
				return true
			}
		case *ast.SelectorExpr:
			if e.Sel.Name == name {
				return true
			}
			if x, ok := e.X.(*ast.Ident); ok && dirs[x.Name] != "" && hasMember(t, dirs, dirs[x.Name], e.Sel.Name, name, depth+1) {
				return true
			}
		}
	}
	return false
}

// qualifiedName matches pkg.Name and pkg.Type.Member, pkg a package of [pkgDirs] not preceded by a
// path or another selector.
var qualifiedName = regexp.MustCompile(`(^|[^\w./-])([a-z][a-z0-9]*)\.([A-Z]\w*)(\.([A-Z]\w*))?`)

// staleNames returns the names of text (at line offsets of where, "doc:line") that the code does not
// declare.
func staleNames(t *testing.T, dirs map[string]string, where string, line int, text string) []string {
	var out []string
	for i, l := range strings.Split(text, "\n") {
		for _, m := range qualifiedName.FindAllStringSubmatch(l, -1) {
			pkg, name, member := m[2], m[3], m[5]
			dir, ok := dirs[pkg]
			if !ok {
				continue
			}
			a := readAPI(t, dir)
			switch {
			case !a.top[name]:
				out = append(out, fmt.Sprintf("%s:%d: %s.%s: package %s (%s) declares no %s", where, line+i, pkg, name, pkg, dir, name))
			case member != "" && a.members[name] != nil && !hasMember(t, dirs, dir, name, member, 0):
				out = append(out, fmt.Sprintf("%s:%d: %s.%s.%s: %s.%s has no method or field %s", where, line+i, pkg, name, member, pkg, name, member))
			}
		}
	}
	return out
}

// staleNamesExempt are the files that name what no longer exists on purpose: the changelog lists the
// names that were removed or renamed.
var staleNamesExempt = []string{"CHANGELOG.md"}

// Every name of the repository's packages that a Markdown file or a Go comment writes as pkg.Name or
// pkg.Type.Member (txinbox.ConfigError, worker.Config.Lease) is one the code declares: a renamed or
// removed name is not left behind in the documents that teach it.
func TestDocumentedNamesExist(t *testing.T) {
	t.Parallel()
	dirs := pkgDirs()
	var found []string
	for _, f := range projectFiles(t, repoRoot) {
		if slices.Contains(staleNamesExempt, f) || f == "internal/doctest/names_test.go" {
			continue
		}
		switch {
		case strings.HasSuffix(f, ".md"):
			b, ok := readProjectFile(t, f)
			if !ok {
				continue
			}
			found = append(found, staleNames(t, dirs, f, 1, string(b))...)
		case strings.HasSuffix(f, ".go"):
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, filepath.Join(repoRoot, f), nil, parser.ParseComments|parser.SkipObjectResolution)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range file.Comments {
				for _, c := range g.List {
					found = append(found, staleNames(t, dirs, f, fset.Position(c.Pos()).Line, c.Text)...)
				}
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("%d names in documents and comments that the code does not declare (renamed or removed? "+
			"name what exists):\n%s", len(found), strings.Join(found, "\n"))
	}
}
