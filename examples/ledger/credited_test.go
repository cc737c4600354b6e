package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/txinbox/txinbox/examples/ledger/internal/api"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/txotel"
)

// Every credit's AccountCredited event has the account as its outbox key (the envelope's
// partitionkey downstream) and numbers its place among the account's credits, 1, 2, ..., in the
// order of the outbox, whether it was applied alone (Apply) or in a batch holding several credits of
// one account (ApplyEvents); an event already credited publishes nothing and takes no number.
func TestAccountCreditedKeyAndOrder(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, db.Pool.Config().ConnConfig, db.Schema); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(db.Store())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	evc := func(id, account string) ledger.Credit {
		return ledger.Credit{AccountID: account, AmountCents: 100, Source: ledger.SourceEvent, EventID: id, OrderID: "o-" + id, OccurredAt: at}
	}
	var got []int64 // AccountSeq of each Applied, in call order
	inTx := func(f func(tx pgx.Tx) error) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, db.Pool, f); err != nil {
			t.Fatal(err)
		}
	}
	inTx(func(tx pgx.Tx) error {
		a, err := l.Apply(ctx, tx, ledger.Credit{AccountID: "a", AmountCents: 100, Source: ledger.SourceCredit})
		got = append(got, a.AccountSeq)
		return err
	})
	inTx(func(tx pgx.Tx) error {
		as, err := l.ApplyEvents(ctx, tx, []ledger.Credit{evc("e1", "a"), evc("e2", "b"), evc("e3", "a"), evc("e4", "a")})
		for _, a := range as {
			got = append(got, a.AccountSeq)
		}
		return err
	})
	inTx(func(tx pgx.Tx) error {
		as, err := l.ApplyEvents(ctx, tx, []ledger.Credit{evc("e3", "a"), evc("e5", "b")}) // e3: already applied
		for _, a := range as {
			got = append(got, a.AccountSeq)
		}
		return err
	})
	inTx(func(tx pgx.Tx) error {
		a, err := l.Apply(ctx, tx, evc("e6", "a"))
		got = append(got, a.AccountSeq)
		return err
	})
	if want := []int64{1, 2, 1, 3, 4, 0, 2, 5}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Applied.AccountSeq = %v, want %v", got, want)
	}

	rows, err := db.Pool.Query(ctx, db.SQL(`SELECT coalesce(key, ''), payload FROM {schema}.outbox WHERE topic = $1 ORDER BY id`),
		ledger.TopicAccountCredited)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Key, Payload string }
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]int64{}
	balances := map[string]int64{}
	for _, e := range events {
		var ev ledger.AccountCredited
		if err := json.Unmarshal([]byte(e.Payload), &ev); err != nil {
			t.Fatal(err)
		}
		if e.Key != ev.AccountID {
			t.Errorf("event of entry %d: outbox key %q, want the account %q", ev.EntryID, e.Key, ev.AccountID)
		}
		balances[ev.AccountID] += ev.AmountCents
		if ev.BalanceCents != balances[ev.AccountID] {
			t.Errorf("event of entry %d: balance %d, want %d", ev.EntryID, ev.BalanceCents, balances[ev.AccountID])
		}
		seqs[ev.AccountID] = append(seqs[ev.AccountID], ev.AccountSeq)
	}
	if fmt.Sprint(seqs) != "map[a:[1 2 3 4 5] b:[1 2]]" {
		t.Fatalf("account_seq of the events in outbox order, by account: %v; want a: 1 to 5, b: 1, 2", seqs)
	}
}

// With a TracerProvider and txotel's Tracer, POST /v1/credits runs under a server span named by its
// route, a child of the caller's traceparent, and the AccountCredited event it publishes records the
// trace context of its txinbox.publish span, a child of the request's: the relay continues that trace.
func TestCreditRequestTraced(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, db.Pool.Config().ConnConfig, db.Schema); err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h, err := api.New(api.Config{DB: db.Pool, Schema: db.Schema, Tracer: txotel.New(txotel.Config{TracerProvider: tp}), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	const caller, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := request(t, srv.Client(), "POST", srv.URL+"/v1/credits", `{"account_id":"acct-t","amount_cents":250}`,
		"Idempotency-Key", "k-traced", "traceparent", "00-"+caller+"-"+callerSpan+"-01")
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/credits: %d %s", r.status, r.body)
	}
	var req, pub sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		switch s.Name() {
		case "POST /v1/credits":
			req = s
		case "txinbox.publish":
			pub = s
		}
	}
	if req == nil || pub == nil {
		t.Fatalf("no request span or no publish span among %d", len(spans.Ended()))
	}
	if req.SpanContext().TraceID().String() != caller || req.Parent().SpanID().String() != callerSpan {
		t.Errorf("the request's span is not a child of the caller's traceparent: trace %s, parent %s",
			req.SpanContext().TraceID(), req.Parent().SpanID())
	}
	if pub.Parent().SpanID() != req.SpanContext().SpanID() || pub.SpanContext().TraceID() != req.SpanContext().TraceID() {
		t.Errorf("the publish span is not a child of the request's span")
	}
	var traceparent string
	if err := db.Pool.QueryRow(ctx, db.SQL(`SELECT coalesce(headers->>'traceparent', '') FROM {schema}.outbox WHERE topic = $1`),
		ledger.TopicAccountCredited).Scan(&traceparent); err != nil {
		t.Fatal(err)
	}
	if want := "00-" + caller + "-" + pub.SpanContext().SpanID().String() + "-01"; traceparent != want {
		t.Errorf("the event's traceparent is %q, want the publish span's context %q", traceparent, want)
	}
	if r := request(t, srv.Client(), "GET", srv.URL+"/v1/accounts/acct-t", ""); r.status != http.StatusOK ||
		!strings.Contains(fmt.Sprint(spanNames(spans.Ended())), "GET /v1/accounts/{id}") {
		t.Errorf("GET /v1/accounts/acct-t: %d; spans %v, want one named by the route", r.status, spanNames(spans.Ended()))
	}
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
