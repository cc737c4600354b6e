// Package tracerec is a txinbox.OperationTracer for tests: a Recorder keeps every operation it is
// told about, with its TraceStart and its TraceEnd, and checks that each TraceEnd pairs a TraceStart
// of the same Op, given the context that TraceStart returned.
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package tracerec

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/txinbox/txinbox"
)

// Op is one operation a Recorder was told about.
type Op struct {
	Start txinbox.TraceStart
	End   txinbox.TraceEnd
}

// Recorder records operations. The zero value is ready; it is safe for concurrent use.
type Recorder struct {
	// Ended, if set, is called with each operation once it ended, outside the Recorder's lock.
	Ended func(Op)

	mu   sync.Mutex
	ops  []Op
	open int
	errs []string
}

type key struct{ r *Recorder }

// open is what the context of an operation carries: its start, and whether it ended.
type open struct {
	start txinbox.TraceStart
	ended bool
}

// TraceStart implements txinbox.OperationTracer.
func (r *Recorder) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	r.mu.Lock()
	r.open++
	r.mu.Unlock()
	return context.WithValue(ctx, key{r}, &open{start: d})
}

// TraceEnd implements txinbox.OperationTracer.
func (r *Recorder) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	o, _ := ctx.Value(key{r}).(*open)
	r.mu.Lock()
	switch {
	case o == nil:
		r.errs = append(r.errs, fmt.Sprintf("TraceEnd of %s without the context of a TraceStart", d.Op))
	case o.ended:
		r.errs = append(r.errs, fmt.Sprintf("TraceEnd of %s twice", d.Op))
	case o.start.Op != d.Op:
		r.errs = append(r.errs, fmt.Sprintf("TraceEnd of %s with the context of a TraceStart of %s", d.Op, o.start.Op))
	}
	var op Op
	if o != nil && !o.ended {
		o.ended = true
		r.open--
		op = Op{Start: o.start, End: d}
		r.ops = append(r.ops, op)
	}
	r.mu.Unlock()
	if op.Start.Op != "" && r.Ended != nil {
		r.Ended(op)
	}
}

// Ops returns the operations that ended, in the order they ended: all of them, or those of the Ops
// given.
func (r *Recorder) Ops(of ...txinbox.Op) []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Op
	for _, op := range r.ops {
		if len(of) == 0 || slices.Contains(of, op.Start.Op) {
			out = append(out, op)
		}
	}
	return out
}

// Open returns the number of operations started and not ended.
func (r *Recorder) Open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

// Err returns an error describing every TraceEnd that paired no TraceStart, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("unpaired trace hooks: %q", r.errs)
}

// DeclaredOps returns the values of the txinbox.Op constants that the root package's trace.go
// declares, read from its source: every operation the core may report to an OperationTracer, so
// that a test enumerating them cannot miss one added later.
func DeclaredOps() ([]txinbox.Op, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, errors.New("tracerec: cannot locate the source of package tracerec")
	}
	path := filepath.Join(filepath.Dir(self), "..", "..", "trace.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	var ops []txinbox.Op
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Op" {
				continue
			}
			for _, val := range v.Values {
				lit, ok := val.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return nil, fmt.Errorf("%s: an Op constant's value is not a string literal: %T", path, val)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, err
				}
				ops = append(ops, txinbox.Op(s))
			}
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("%s declares no Op constant", path)
	}
	return ops, nil
}
