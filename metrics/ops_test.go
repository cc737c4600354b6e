package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/metrics"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
)

// counted says, for each Op Metrics counts, the sample an operation changes (name and labels), its
// value once the operation started (-1: absent) and once it ended, and the end of that operation.
var counted = map[txinbox.Op]struct {
	end               txinbox.TraceEnd
	name              string
	labels            []string
	started, finished float64
}{
	txinbox.OpReceive: {txinbox.TraceEnd{Results: []string{"inserted"}},
		"txinbox_received_total", []string{"consumer", "ledger", "outcome", "inserted"}, -1, 1},
	txinbox.OpSeenGet: {txinbox.TraceEnd{Results: []string{"hit"}},
		"txinbox_seen_cache_total", []string{"consumer", "ledger", "result", "hit"}, -1, 1},
	txinbox.OpSeenPut: {txinbox.TraceEnd{Err: errors.New("down")},
		"txinbox_seen_cache_errors_total", []string{"op", "put"}, -1, 1},
	txinbox.OpSeenInvalidate: {txinbox.TraceEnd{Err: errors.New("down")},
		"txinbox_seen_cache_errors_total", []string{"op", "invalidate"}, -1, 1},
	txinbox.OpHandled: {txinbox.TraceEnd{Outcome: txinbox.OutcomeRetry, Reason: "error", Duration: 1, Err: errors.New("failed")},
		"txinbox_retries_total", []string{"consumer", "ledger", "kind", "credit", "reason", "error"}, -1, 1},
	txinbox.OpCharge: {txinbox.TraceEnd{},
		"txinbox_unfinished_batches_total", []string{"consumer", "ledger"}, -1, 1},
	txinbox.OpTakeover: {txinbox.TraceEnd{},
		"txinbox_takeovers_total", []string{"consumer", "ledger", "alone", "true"}, -1, 1},
	txinbox.OpRelayed: {txinbox.TraceEnd{Outcome: txinbox.OutcomeRetry, Err: context.DeadlineExceeded},
		"txinbox_outbox_retries_total", []string{"topic", "orders", "reason", "timeout"}, -1, 1},
	txinbox.OpLead: {txinbox.TraceEnd{Reason: "stopped"},
		"txinbox_maintainer_leader", []string{"schema", "billing", "owner", "m-1"}, 1, 0},
	txinbox.OpJob: {txinbox.TraceEnd{Err: errors.New("failed")},
		"txinbox_maintenance_runs_total", []string{"schema", "billing", "job", "rotate", "outcome", "error"}, -1, 1},
}

// notCounted are the Ops Metrics has no use for (package txotel traces them).
var notCounted = map[txinbox.Op]bool{txinbox.OpHandle: true, txinbox.OpPublish: true, txinbox.OpRelay: true}

// TestEveryOp: for every Op the root package declares (enumerated from its source, so that a new
// operation is a decision here), Metrics either counts it, in the sample counted says, between its
// TraceStart and the TraceEnd that pairs it, or ignores it; it panics on none, with every field of
// the data set, and a TraceEnd whose context is not its TraceStart's (which pairs nothing) counts
// nothing.
func TestEveryOp(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ops, err := tracerec.DeclaredOps()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		c, ok := counted[op]
		if !ok && !notCounted[op] {
			t.Errorf("%s: neither in counted nor in notCounted: decide what Metrics counts of it", op)
			continue
		}
		reg := prometheus.NewRegistry()
		m, err := metrics.New(db.Store(), metrics.Config{Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		before := counts(t, reg)
		// Unpaired: a TraceEnd without its TraceStart's context.
		m.TraceEnd(context.Background(), txinbox.TraceEnd{Op: op, Results: []string{"inserted"}, Outcome: txinbox.OutcomeRetry})
		if got := counts(t, reg); got != before {
			t.Errorf("%s: a TraceEnd without its TraceStart's context counted: %s", op, got)
		}
		parent := context.Background()
		ctx := m.TraceStart(parent, txinbox.TraceStart{Op: op, Schema: "billing", Consumer: "ledger", Owner: "m-1", Job: "rotate",
			Attempt: 2, OrderingKey: "acct-1", Messages: []txinbox.TraceMessage{{ID: "k-1", Consumer: "ledger", Kind: "credit",
				Topic: "orders", Headers: map[string]string{"a": "b"}}}})
		if !ok {
			if ctx != parent {
				t.Errorf("%s: TraceStart of an Op Metrics ignores returned another context", op)
			}
			m.TraceEnd(ctx, txinbox.TraceEnd{Op: op, Outcome: txinbox.OutcomeCompleted, Err: errors.New("x")})
			if got := counts(t, reg); got != before {
				t.Errorf("%s: an Op Metrics ignores was counted: %s", op, got)
			}
			continue
		}
		if v := value(t, scrape(t, reg), c.name, c.labels...); v != c.started {
			t.Errorf("%s: %s%v = %v after TraceStart, want %v", op, c.name, c.labels, v, c.started)
		}
		end := c.end
		end.Op = op
		m.TraceEnd(ctx, end)
		if v := value(t, scrape(t, reg), c.name, c.labels...); v != c.finished {
			t.Errorf("%s: %s%v = %v after TraceEnd, want %v", op, c.name, c.labels, v, c.finished)
		}
	}
}

// counts returns the samples of reg's counters and histograms, and of the leader gauge (what Metrics
// counts, not what the scrapes read from the database), as text.
func counts(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	fs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fs {
		if typ := f.GetType().String(); typ != "COUNTER" && typ != "HISTOGRAM" && f.GetName() != "txinbox_maintainer_leader" {
			continue
		}
		for _, s := range f.GetMetric() {
			fmt.Fprintln(&b, f.GetName(), s.String())
		}
	}
	return b.String()
}
