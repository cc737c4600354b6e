package tracerec_test

import (
	"context"
	"slices"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
)

// DeclaredOps finds the Ops of trace.go, and a Recorder reports an unpaired TraceEnd.
func TestRecorder(t *testing.T) {
	ops, err := tracerec.DeclaredOps()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []txinbox.Op{txinbox.OpReceive, txinbox.OpHandled, txinbox.OpJob} {
		if !slices.Contains(ops, op) {
			t.Errorf("DeclaredOps() = %v, without %s", ops, op)
		}
	}
	var r tracerec.Recorder
	ctx := r.TraceStart(context.Background(), txinbox.TraceStart{Op: txinbox.OpReceive})
	if r.Open() != 1 {
		t.Fatalf("open %d, want 1", r.Open())
	}
	r.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpReceive})
	if r.Open() != 0 || len(r.Ops(txinbox.OpReceive)) != 1 || r.Err() != nil {
		t.Fatalf("after a pair: open %d, ops %v, err %v", r.Open(), r.Ops(), r.Err())
	}
	r.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpReceive})
	r.TraceEnd(context.Background(), txinbox.TraceEnd{Op: txinbox.OpJob})
	if r.Err() == nil {
		t.Fatal("an unpaired TraceEnd was not reported")
	}
}
