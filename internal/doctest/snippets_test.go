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
	"testing"
)

// block is one fenced block of a document.
type block struct {
	doc     string // the document, relative to the repository's root
	line    int    // the line of the block's first line of code
	code    string // the code, without the indentation of its fence
	comment string // the text of an HTML comment on the line before the fence: <!-- text -->
}

var htmlComment = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// sig is the function signature given by the block's comment "go: func(...)", or "".
func (b block) sig() string {
	if s, ok := strings.CutPrefix(b.comment, "go:"); ok {
		return strings.TrimSpace(s)
	}
	return ""
}

// fencedBlocks returns the blocks of the document doc (relative to the repository's root) fenced as
// ```lang.
func fencedBlocks(t *testing.T, doc, lang string) []block {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimLeft(lines[i], " \t")
		ticks := len(fence) - len(strings.TrimLeft(fence, "`"))
		if ticks < 3 {
			continue
		}
		indent := len(lines[i]) - len(fence)
		fenceLang := strings.TrimSpace(fence[ticks:])
		start := i + 1
		// The block ends at a line of at least as many backticks (a longer fence can show a shorter one).
		for i++; i < len(lines); i++ {
			if l := strings.TrimSpace(lines[i]); len(l) >= ticks && strings.Trim(l, "`") == "" {
				break
			}
		}
		if fenceLang != lang {
			continue
		}
		var code strings.Builder
		for _, l := range lines[start:min(i, len(lines))] {
			cut := min(indent, len(l)-len(strings.TrimLeft(l, " \t")))
			code.WriteString(l[cut:] + "\n")
		}
		bl := block{doc: doc, line: start + 1, code: code.String()}
		for j := start - 2; j >= 0; j-- {
			if prev := strings.TrimSpace(lines[j]); prev != "" {
				if m := htmlComment.FindStringSubmatch(prev); m != nil {
					bl.comment = m[1]
				}
				break
			}
		}
		out = append(out, bl)
	}
	return out
}

// imports are the packages a block or the prelude may name, by the name they are used with.
var imports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "http": "net/http", "json": "encoding/json",
	"log": "log", "os": "os", "signal": "os/signal", "slog": "log/slog", "syscall": "syscall",
	"testing": "testing", "time": "time",
	"pgx": "github.com/jackc/pgx/v5", "pgconn": "github.com/jackc/pgx/v5/pgconn",
	"pgxpool":     "github.com/jackc/pgx/v5/pgxpool",
	"nats":        "github.com/nats-io/nats.go",
	"jetstream":   "github.com/nats-io/nats.go/jetstream",
	"kgo":         "github.com/twmb/franz-go/pkg/kgo",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"promhttp":    "github.com/prometheus/client_golang/prometheus/promhttp",
	"txinbox":     modulePath,
	"admin":       modulePath + "/admin",
	"console":     modulePath + "/console",
	"idempotency": modulePath + "/idempotency",
	"inbox":       modulePath + "/inbox",
	"maintain":    modulePath + "/maintain",
	"metrics":     modulePath + "/metrics",
	"migrate":     modulePath + "/migrate",
	"migrations":  modulePath + "/migrations",
	"outbox":      modulePath + "/outbox",
	"retention":   modulePath + "/retention",
	"runner":      modulePath + "/runner",
	"txotel":      modulePath + "/txotel",
	"seen":        modulePath + "/seen",
	"worker":      modulePath + "/worker",
	"adapters":    modulePath + "/adapters",
	"kafka":       modulePath + "/adapters/kafka",
	"natsjs":      modulePath + "/adapters/natsjs",
	"rabbitmq":    modulePath + "/adapters/rabbitmq",
	"webhook":     modulePath + "/adapters/webhook",
	"seenredis":   modulePath + "/seenredis",
	"txinboxtest": modulePath + "/txinboxtest",
	"conformance": modulePath + "/adapters/conformance",
}

// withImports parses src (a file with no import declaration) and returns it with the import
// declaration of the packages of [imports] that it names.
func withImports(name, src string) (string, *ast.File, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return "", nil, err
	}
	var used []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil && imports[id.Name] != "" && !slices.Contains(used, imports[id.Name]) {
				used = append(used, imports[id.Name])
			}
		}
		return true
	})
	if len(used) == 0 {
		return src, f, nil
	}
	slices.Sort(used)
	pkg, rest, _ := strings.Cut(src, "\n")
	return pkg + "\n\nimport (\n\t\"" + strings.Join(used, "\"\n\t\"") + "\"\n)\n" + rest, f, nil
}

// source returns the Go file of b: b itself if it is a complete file, else b as declarations or as
// a function's body (see the package documentation), in package snippet, with its imports.
func (b block) source() (string, error) {
	lineDirective := fmt.Sprintf("//line %s:%d\n", b.doc, b.line)
	if strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
		return lineDirective + b.code, nil
	}
	sig := b.sig()
	if sig == "" {
		if _, err := parser.ParseFile(token.NewFileSet(), "", "package snippet\n"+b.code, 0); err == nil {
			src, _, err := withImports(b.doc, "package snippet\n"+lineDirective+b.code)
			return src, err
		}
	}
	if sig == "" {
		sig = "func()"
	}
	head := "package snippet\nfunc _" + strings.TrimPrefix(sig, "func") + " {\n" + lineDirective
	_, f, err := withImports(b.doc, head+b.code+"}\n")
	if err != nil {
		return "", err
	}
	// Statements end the body: what they declare and do not use is shown for its call, and a
	// function with results may end without a return.
	var tail strings.Builder
	fn := f.Decls[len(f.Decls)-1].(*ast.FuncDecl)
	for _, st := range fn.Body.List {
		var names []*ast.Ident
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						names = append(names, id)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, s := range g.Specs {
					names = append(names, s.(*ast.ValueSpec).Names...)
				}
			}
		}
		for _, id := range names {
			if id.Name != "_" {
				fmt.Fprintf(&tail, "\t_ = %s\n", id.Name)
			}
		}
	}
	if fn.Type.Results != nil {
		tail.WriteString("\tpanic(\"the end of the block\")\n")
	}
	src, _, err := withImports(b.doc, head+b.code+tail.String()+"}\n")
	return src, err
}

// snippetDocs are the documents whose Go blocks are compiled: every Markdown file of the repository
// with a ```go block (README.md, adapters/README.md, docs/*.md, ...).
func snippetDocs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range projectFiles(t, repoRoot) {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		b, ok := readProjectFile(t, f)
		if !ok {
			continue
		}
		if strings.Contains(string(b), "```go\n") {
			out = append(out, f)
		}
	}
	if !slices.Contains(out, "README.md") {
		t.Fatalf("README.md is not among the documents with Go blocks: %v", out)
	}
	return out
}

// Every ```go block of the repository's Markdown files compiles against the repository's code, in a
// module of an application's own (the package documentation says how blocks that are not programs
// are completed).
func TestGoSnippetsCompile(t *testing.T) {
	t.Parallel()
	var blocks []block
	for _, doc := range snippetDocs(t) {
		blocks = append(blocks, fencedBlocks(t, doc, "go")...)
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go block found in the documents")
	}
	prelude, err := os.ReadFile(filepath.Join("testdata", "prelude.go"))
	if err != nil {
		t.Fatal(err)
	}
	preludeSrc, _, err := withImports("testdata/prelude.go", string(prelude))
	if err != nil {
		t.Fatal(err)
	}
	dir := newAppModule(t, ".", "adapters", "seenredis")
	var where []string
	for i, b := range blocks {
		src, err := b.source()
		if err != nil {
			t.Errorf("%s:%d: the block does not parse: %v", b.doc, b.line, err)
			continue
		}
		pkg := filepath.Join(dir, fmt.Sprintf("b%02d", i))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "block.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
			if err := os.WriteFile(filepath.Join(pkg, "prelude.go"), []byte(preludeSrc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		where = append(where, fmt.Sprintf("b%02d: %s:%d", i, b.doc, b.line))
	}
	run(t, dir, goEnv(), "go", "mod", "tidy")
	cmd := goCommand(dir, "build", "./...")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the documents' Go blocks do not compile (%v):\n%s\nblocks:\n%s", err, out, strings.Join(where, "\n"))
	}
	t.Logf("%d blocks compiled:\n%s", len(blocks), strings.Join(where, "\n"))
}
