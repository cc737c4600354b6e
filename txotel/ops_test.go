package txotel_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txotel"
)

// declaredOps returns the values of the txinbox.Op constants that the root package's trace.go
// declares: every operation the core may report to an OperationTracer.
func declaredOps(t *testing.T) []txinbox.Op {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../trace.go", nil, 0)
	if err != nil {
		t.Fatal(err)
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
					t.Fatalf("an Op constant's value is not a string literal: %T", val)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, txinbox.Op(s))
			}
		}
	}
	if len(ops) < 4 {
		t.Fatalf("found %d Op constants in trace.go (%v), want at least receive, handle, publish and relay", len(ops), ops)
	}
	return ops
}

// TestEveryOpHasASpan: for every Op the root package declares (enumerated from its source, so that
// a new operation cannot be forgotten here), TraceStart starts a span, returned in its context, and
// TraceEnd with the same Op ends exactly that span: none is left open and none of the caller's ends.
func TestEveryOpHasASpan(t *testing.T) {
	t.Parallel()
	for _, op := range declaredOps(t) {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		tr := txotel.New(txotel.Config{TracerProvider: tp})
		parent, callers := tp.Tracer("test").Start(context.Background(), "caller")
		ctx := tr.TraceStart(parent, txinbox.TraceStart{Op: op, Consumer: "billing", Attempt: 1,
			Messages: []txinbox.TraceMessage{{ID: "m-1", Kind: "order.created", Topic: "orders"}}})
		span := trace.SpanFromContext(ctx)
		if !span.SpanContext().IsValid() || span.SpanContext().SpanID() == callers.SpanContext().SpanID() {
			t.Errorf("%s: TraceStart returned no span of its own", op)
			continue
		}
		tr.TraceEnd(ctx, txinbox.TraceEnd{Op: op})
		ended := spans.Ended()
		if len(ended) != 1 || ended[0].SpanContext().SpanID() != span.SpanContext().SpanID() {
			t.Errorf("%s: after TraceEnd, %d spans ended, want exactly the operation's", op, len(ended))
		}
		callers.End()
	}
}
