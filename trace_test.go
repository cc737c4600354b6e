package txinbox_test

import (
	"context"
	"slices"
	"testing"

	"github.com/txinbox/txinbox"
)

// logTracer logs its calls into a shared log, and marks the context it returns with its name.
type logTracer struct {
	name string
	log  *[]string
}

type mark struct{ name string }

func (l *logTracer) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	*l.log = append(*l.log, l.name+" start "+string(d.Op)+" in "+marks(ctx))
	return context.WithValue(ctx, mark{l.name}, true)
}

func (l *logTracer) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	*l.log = append(*l.log, l.name+" end "+string(d.Op)+" in "+marks(ctx))
}

// injectTracer is a logTracer that injects a header of its name.
type injectTracer struct{ logTracer }

func (i *injectTracer) Inject(ctx context.Context, h map[string]string) {
	h[i.name] = marks(ctx)
	h["last"] = i.name
}

// marks lists the tracers whose mark ctx carries, in the order a, b, c.
func marks(ctx context.Context) string {
	out := ""
	for _, n := range []string{"a", "b", "c"} {
		if ctx.Value(mark{n}) != nil {
			out += n
		}
	}
	if out == "" {
		return "-"
	}
	return out
}

// Tracers calls its tracers' TraceStart in order, each with the context the one before returned, and
// their TraceEnd in the reverse order, each with the context its own TraceStart returned; nil entries
// (a nil interface, a nil pointer) are skipped; Inject goes to the Injectors among them, in order.
func TestTracers(t *testing.T) {
	t.Parallel()
	var log []string
	a, b, c := &logTracer{"a", &log}, &injectTracer{logTracer{"b", &log}}, &injectTracer{logTracer{"c", &log}}
	var nilPtr *logTracer
	tr := txinbox.Tracers(nil, a, nilPtr, b, nil, c)
	parent := context.WithValue(context.Background(), mark{"x"}, true)
	ctx := tr.TraceStart(parent, txinbox.TraceStart{Op: txinbox.OpReceive})
	if ctx.Value(mark{"x"}) == nil {
		t.Error("the returned context does not derive from the operation's")
	}
	if got := marks(ctx); got != "abc" {
		t.Errorf("the returned context carries the marks %q, want abc (the last tracer's context)", got)
	}
	tr.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpReceive})
	want := []string{
		"a start receive in -", "b start receive in a", "c start receive in ab",
		"c end receive in abc", "b end receive in ab", "a end receive in a",
	}
	if !slices.Equal(log, want) {
		t.Errorf("calls:\n%q\nwant\n%q", log, want)
	}

	in, ok := tr.(txinbox.Injector)
	if !ok {
		t.Fatal("Tracers of Injectors is no Injector")
	}
	h := map[string]string{}
	in.Inject(ctx, h)
	if h["b"] != "abc" || h["c"] != "abc" || h["last"] != "c" || len(h) != 3 {
		t.Errorf("Inject wrote %v, want b's then c's, with the context given", h)
	}
	if _, ok := txinbox.Tracers(a, a).(txinbox.Injector); ok {
		t.Error("Tracers of no Injector is an Injector")
	}

	if tr := txinbox.Tracers(); tr != nil {
		t.Errorf("Tracers() = %v, want nil", tr)
	}
	if tr := txinbox.Tracers(nil, nilPtr); tr != nil {
		t.Errorf("Tracers(nil, nil pointer) = %v, want nil", tr)
	}
	if tr := txinbox.Tracers(nil, b); tr != b {
		t.Errorf("Tracers(nil, b) = %v, want b itself", tr)
	}
}

// A TraceEnd given a context that did not come from the combined TraceStart still reaches every
// tracer, with that context.
func TestTracersEndWithoutStart(t *testing.T) {
	t.Parallel()
	var log []string
	tr := txinbox.Tracers(&logTracer{"a", &log}, &logTracer{"b", &log})
	tr.TraceEnd(context.Background(), txinbox.TraceEnd{Op: txinbox.OpJob})
	if want := []string{"b end job in -", "a end job in -"}; !slices.Equal(log, want) {
		t.Errorf("calls %q, want %q", log, want)
	}
}
