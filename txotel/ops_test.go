package txotel_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
	"github.com/txinbox/txinbox/txotel"
)

// spanOf names the span each Op makes; an Op absent from it makes none (the Tracer ignores it).
var spanOf = map[txinbox.Op]string{
	txinbox.OpReceive: "txinbox.receive",
	txinbox.OpHandle:  "txinbox.handle",
	txinbox.OpPublish: "txinbox.publish",
	txinbox.OpRelay:   "txinbox.relay",
}

// ignored are the Ops the Tracer makes no span of: every Op is in spanOf or here, so that a new
// operation is a decision.
var ignored = map[txinbox.Op]bool{
	txinbox.OpSeenGet: true, txinbox.OpSeenPut: true, txinbox.OpSeenInvalidate: true, txinbox.OpHandled: true,
	txinbox.OpCharge: true, txinbox.OpTakeover: true, txinbox.OpRelayed: true, txinbox.OpLead: true, txinbox.OpJob: true,
}

// TestEveryOp: for every Op the root package declares (enumerated from its source, so that a new
// operation cannot be forgotten here), an Op that makes a span starts it in TraceStart, returned in
// its context, and TraceEnd with the same Op ends exactly that span; an Op the Tracer ignores
// returns the caller's context as it is, and its TraceEnd ends nothing (not the caller's span).
// Neither panics on data with every field set, nor on a TraceEnd whose context carries no span.
func TestEveryOp(t *testing.T) {
	t.Parallel()
	ops, err := tracerec.DeclaredOps()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		name, traced := spanOf[op]
		if !traced && !ignored[op] {
			t.Errorf("%s: neither in spanOf nor in ignored: decide whether txotel traces it", op)
			continue
		}
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		tr := txotel.New(txotel.Config{TracerProvider: tp})
		parent, callers := tp.Tracer("test").Start(context.Background(), "caller")
		ctx := tr.TraceStart(parent, txinbox.TraceStart{Op: op, Schema: "s", Consumer: "billing", Owner: "o", Job: "rotate",
			Attempt: 1, OrderingKey: "k", Messages: []txinbox.TraceMessage{{ID: "m-1", Consumer: "billing", Kind: "order.created",
				Topic: "orders", Headers: map[string]string{"traceparent": "garbage"}}}})
		span := trace.SpanFromContext(ctx)
		if !traced {
			if ctx != parent {
				t.Errorf("%s: TraceStart of an ignored Op returned another context", op)
			}
		} else if !span.SpanContext().IsValid() || span.SpanContext().SpanID() == callers.SpanContext().SpanID() {
			t.Errorf("%s: TraceStart returned no span of its own", op)
			continue
		}
		tr.TraceEnd(ctx, txinbox.TraceEnd{Op: op, Outcome: txinbox.OutcomeCompleted, Reason: "error",
			Results: []string{"inserted"}, EventIDs: []string{"e-1"}, Duration: 1, Err: context.Canceled})
		tr.TraceEnd(context.Background(), txinbox.TraceEnd{Op: op}) // no span in ctx: ends nothing of ours
		ended := spans.Ended()
		switch {
		case !traced && len(ended) != 0:
			t.Errorf("%s: the ignored Op's TraceEnd ended %d spans, want none", op, len(ended))
		case traced && (len(ended) != 1 || ended[0].SpanContext().SpanID() != span.SpanContext().SpanID() || ended[0].Name() != name):
			t.Errorf("%s: after TraceEnd, %d spans ended, want exactly the operation's %s", op, len(ended), name)
		}
		callers.End()
	}
}
