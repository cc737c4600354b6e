package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/metrics"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/seen"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
	"github.com/txinbox/txinbox/txotel"
	"github.com/txinbox/txinbox/worker"
)

type credit struct {
	Amount int64 `json:"amount"`
}

// scrape fetches the registry's exposition through promhttp.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %v\n%s", resp.StatusCode, err, b)
	}
	return string(b)
}

// One Metrics value counts handling (as the Store's Tracer): a pool's committed outcome
// (txinbox.OpHandled), fed to it by hand here, is counted, and the registry gathered as a scrape
// would.
func TestHandledCounts(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(db.Store(), metrics.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := m.TraceStart(context.Background(), txinbox.TraceStart{Op: txinbox.OpHandled, Consumer: "ledger", Attempt: 1,
		Messages: []txinbox.TraceMessage{{ID: "k", Consumer: "ledger", Kind: "credit"}}})
	m.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpHandled, Outcome: "dead", Reason: "permanent", Duration: 3 * time.Millisecond})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if c := s.GetCounter(); c != nil && c.GetValue() > 0 {
				var ls []string
				for _, l := range s.GetLabel() {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				got = append(got, fmt.Sprint(f.GetName(), " ", strings.Join(ls, " "), " ", c.GetValue()))
			}
		}
	}
	want := []string{
		"txinbox_dead_letters_total consumer=ledger kind=credit reason=permanent 1",
		"txinbox_processed_total consumer=ledger kind=credit outcome=dead 1",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("counters: %q, want %q", got, want)
	}
}

// gatherErr gathers reg and returns the errors of the collection of the metric name (those naming its
// Desc), nil when there is none.
func gatherErr(reg *prometheus.Registry, name string) error {
	_, err := reg.Gather()
	errs := []error{err}
	var me prometheus.MultiError
	if errors.As(err, &me) {
		errs = me
	}
	var out []error
	for _, e := range errs {
		if e != nil && strings.Contains(e.Error(), `fqName: "`+name+`"`) {
			out = append(out, e)
		}
	}
	return errors.Join(out...)
}

// value returns the value of the sample of metric name whose labels include every name="value" pair
// given, or -1 if there is none.
func value(t *testing.T, text, name string, labels ...string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for i := 0; i < len(labels); i += 2 {
			if !strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
			}
		}
		if ok {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func TestMetricsAndSpans(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	store := db.Store()
	otel := txotel.New(txotel.Config{TracerProvider: tp})
	m, err := metrics.New(store, metrics.Config{Registerer: reg, Consumers: []string{"ledger", "idle"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &tracerec.Recorder{}
	store.Tracer = txinbox.Tracers(otel, m, rec) // the spans, the counts, and the pairing of the hooks
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}

	// The sender's trace, carried in the headers of one message.
	sendCtx, send := tp.Tracer("test").Start(ctx, "send")
	msg := func(key, payload string) inbox.Message {
		return inbox.Message{Consumer: "ledger", Key: key, Kind: "credit", Payload: []byte(payload)}
	}
	var batch []inbox.Message
	for _, k := range []string{"m-0", "m-1", "m-2", "m-3", "m-4", "m-5", "m-6", "m-7", "m-8", "m-9", "flaky", "poison"} {
		batch = append(batch, msg(k, `{"amount":1}`))
	}
	batch = append(batch, msg("undecodable", `{"amount":"x"}`))
	traced := msg("traced", `{"amount":1}`)
	traced.Headers = map[string]string{"source": "test"}
	store.Tracer.(txinbox.Injector).Inject(sendCtx, traced.Headers)
	batch = append(batch, traced)
	send.End()
	if _, err := client.ReceiveMany(ctx, batch); err != nil { // 14 inserted
		t.Fatal(err)
	}
	if _, err := client.ReceiveMany(ctx, batch[:5]); err != nil { // 5 duplicates
		t.Fatal(err)
	}
	if _, err := client.Receive(ctx, msg("m-0", `{"amount":2}`)); !errors.Is(err, inbox.ErrKeyConflict) { // 1 conflict
		t.Fatalf("want a conflict, got %v", err)
	}
	if _, err := client.Receive(ctx, inbox.Message{Consumer: "ledger"}); !errors.Is(err, txinbox.ErrInvalidMessage) { // 1 error
		t.Fatalf("want invalid, got %v", err)
	}

	before := scrape(t, reg)
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"consumer", "ledger", "state", "ready"}, 14},
		{[]string{"consumer", "ledger", "state", "claimed"}, 0},
		{[]string{"consumer", "idle", "state", "ready"}, 0},
	} {
		if v := value(t, before, "txinbox_queue_messages", c.labels...); v != c.want {
			t.Errorf("queue_messages%v = %v, want %v", c.labels, v, c.want)
		}
	}
	if v := value(t, before, "txinbox_queue_oldest_age_seconds", "consumer", "ledger"); v < 0 {
		t.Errorf("oldest age = %v", v)
	}

	var flaky, calls atomic.Int64
	var handlerTrace atomic.Value
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, msg *worker.Message[credit]) error {
		calls.Add(1)
		switch msg.Key {
		case "flaky":
			if flaky.Add(1) == 1 {
				return errors.New("try again")
			}
		case "poison":
			return txinbox.Permanent(errors.New("rejected"))
		case "traced":
			handlerTrace.Store(trace.SpanContextFromContext(ctx))
		}
		return nil
	})
	p, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs,
		PollInterval: 20 * time.Millisecond,
		Backoff:      txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })})
	if err != nil {
		t.Fatal(err)
	}
	runUntilDrained(t, ctx, db, p)

	after := scrape(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"txinbox_received_total", []string{"consumer", "ledger", "outcome", "inserted"}, 14},
		{"txinbox_received_total", []string{"consumer", "ledger", "outcome", "duplicate"}, 5},
		{"txinbox_received_total", []string{"consumer", "ledger", "outcome", "conflict"}, 1},
		{"txinbox_receive_errors_total", nil, 1},
		{"txinbox_processed_total", []string{"consumer", "ledger", "kind", "credit", "outcome", "completed"}, 12},
		{"txinbox_processed_total", []string{"consumer", "ledger", "kind", "credit", "outcome", "retry"}, 1},
		{"txinbox_processed_total", []string{"consumer", "ledger", "kind", "credit", "outcome", "dead"}, 2},
		{"txinbox_retries_total", []string{"consumer", "ledger", "kind", "credit", "reason", "error"}, 1},
		{"txinbox_dead_letters_total", []string{"consumer", "ledger", "kind", "credit", "reason", "permanent"}, 1},
		{"txinbox_dead_letters_total", []string{"consumer", "ledger", "kind", "credit", "reason", "decode"}, 1},
		{"txinbox_handler_duration_seconds_count", []string{"consumer", "ledger", "kind", "credit", "outcome", "completed"}, 12},
		{"txinbox_queue_messages", []string{"consumer", "ledger", "state", "ready"}, 0},
		{"txinbox_queue_oldest_age_seconds", []string{"consumer", "ledger"}, 0},
	} {
		if v := value(t, after, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", after)
	}

	// Spans: one per receive call, one per handler call; the traced message's handler span (and its
	// ctx) belongs to the sender's trace, as a child of the sender's span. The handler calls are those
	// of the function plus the undecodable message's one attempt (its payload never reaches it); a
	// message may be called twice in one attempt when a batch-mate fails (the optimistic run).
	var receives, handles int
	var tracedSpan sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		switch s.Name() {
		case "txinbox.receive":
			receives++
		case "txinbox.handle":
			handles++
			if s.SpanContext().TraceID() == send.SpanContext().TraceID() {
				tracedSpan = s
			}
		}
	}
	if want := int(calls.Load()) + 1; receives != 4 || handles != want || handles < 15 {
		t.Errorf("spans: %d receive, %d handle; want 4 and %d (one per handler call), at least 15 (one per attempt)", receives, handles, want)
	}
	if tracedSpan == nil || tracedSpan.Parent().SpanID() != send.SpanContext().SpanID() {
		t.Fatalf("no handle span in the sender's trace (%v)", tracedSpan)
	}
	if sc, _ := handlerTrace.Load().(trace.SpanContext); sc.TraceID() != send.SpanContext().TraceID() || sc.SpanID() != tracedSpan.SpanContext().SpanID() {
		t.Fatalf("handler ctx span %v, want the handle span %v", sc, tracedSpan.SpanContext())
	}
	// Every operation the components started, they ended, once, with its context.
	if err := rec.Err(); err != nil || rec.Open() != 0 {
		t.Fatalf("hooks: %v, %d operations not ended", err, rec.Open())
	}
}

// The oldest-age gauge reads the database: a queued message backdated by two minutes (received_at,
// which the collector reads for each consumer's oldest queued message) makes it at least 120 s, per
// consumer; a consumer with nothing queued reports 0.
func TestQueueOldestAge(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(db.Store(), metrics.Config{Registerer: reg, Consumers: []string{"ledger", "idle"}}); err != nil {
		t.Fatal(err)
	}
	client, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []inbox.Message{
		{Consumer: "ledger", Key: "a", Kind: "credit", Payload: []byte(`{"amount":1}`)},
		{Consumer: "ledger", Key: "b", Kind: "credit", Payload: []byte(`{"amount":1}`)},
		{Consumer: "billing", Key: "c", Kind: "credit", Payload: []byte(`{"amount":1}`)},
	} {
		if _, err := client.Receive(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// ledger's oldest message two minutes back, billing's in 2000.
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox SET received_at = CASE consumer
		WHEN 'ledger' THEN now() - interval '120 seconds' ELSE '2000-01-01 00:00:00+00' END
		WHERE key IN ('a', 'c')`)); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, reg)
	ledger := value(t, text, "txinbox_queue_oldest_age_seconds", "consumer", "ledger")
	billing := value(t, text, "txinbox_queue_oldest_age_seconds", "consumer", "billing")
	if ledger < 120 || ledger >= billing {
		t.Errorf("ledger oldest age = %v, want at least 120 (and less than billing's %v)", ledger, billing)
	}
	if billing < 20*365*24*3600 {
		t.Errorf("billing oldest age = %v, want more than 20 years in seconds", billing)
	}
	if v := value(t, text, "txinbox_queue_oldest_age_seconds", "consumer", "idle"); v != 0 {
		t.Errorf("idle oldest age = %v, want 0", v)
	}
	if v := value(t, text, "txinbox_queue_messages", "consumer", "ledger", "state", "ready"); v != 2 {
		t.Errorf("ledger ready = %v, want 2", v)
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", text)
	}
}

// A message that runs out of attempts is one dead letter, labelled with the reason of its last
// failure (there is no separate "out of attempts" reason): error for a failing handler, timeout for
// one that exceeds its Timeout. Its earlier failures are counted as retries.
func TestDeadLetterOutOfAttempts(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	store := db.Store()
	m, err := metrics.New(store, metrics.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	store.Tracer = m
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReceiveMany(ctx, []inbox.Message{
		{Consumer: "ledger", Key: "doomed", Kind: "credit", Payload: []byte(`{"amount":1}`)},
		{Consumer: "ledger", Key: "fine", Kind: "credit", Payload: []byte(`{"amount":1}`)},
		{Consumer: "ledger", Key: "stuck", Kind: "slow", Payload: []byte(`{"amount":1}`)},
	}); err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, msg *worker.Message[credit]) error {
		if msg.Key == "doomed" {
			return errors.New("ledger unavailable")
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 3})
	worker.Handle(hs, "slow", func(ctx context.Context, tx pgx.Tx, msg *worker.Message[credit]) error {
		<-ctx.Done()
		return ctx.Err()
	}, worker.HandlerConfig{MaxAttempts: 2, Timeout: 100 * time.Millisecond})
	p, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs,
		PollInterval: 20 * time.Millisecond, Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })})
	if err != nil {
		t.Fatal(err)
	}
	runUntilDrained(t, ctx, db, p)
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead' AND
		((key = 'doomed' AND attempts_started = 3 AND attempts_failed = 3) OR (key = 'stuck' AND attempts_started = 2 AND attempts_failed = 2))`); n != 2 {
		t.Fatalf("%d of 2 messages dead after all their attempts", n)
	}

	text := scrape(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"txinbox_dead_letters_total", []string{"kind", "credit", "reason", "error"}, 1},
		{"txinbox_retries_total", []string{"kind", "credit", "reason", "error"}, 2},
		{"txinbox_dead_letters_total", []string{"kind", "slow", "reason", "timeout"}, 1},
		{"txinbox_retries_total", []string{"kind", "slow", "reason", "timeout"}, 1},
		{"txinbox_processed_total", []string{"kind", "credit", "outcome", "completed"}, 1},
		{"txinbox_processed_total", []string{"kind", "credit", "outcome", "retry"}, 2},
		{"txinbox_processed_total", []string{"kind", "credit", "outcome", "dead"}, 1},
		{"txinbox_processed_total", []string{"kind", "slow", "outcome", "retry"}, 1},
		{"txinbox_processed_total", []string{"kind", "slow", "outcome", "dead"}, 1},
		// No other reason: out of attempts is not "permanent" nor "crashed".
		{"txinbox_dead_letters_total", []string{"reason", "permanent"}, -1},
		{"txinbox_dead_letters_total", []string{"reason", "crashed"}, -1},
	} {
		if v := value(t, text, c.name, append([]string{"consumer", "ledger"}, c.labels...)...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", text)
	}
}

// runUntilDrained starts p, waits until db's queue is empty (the deadline only keeps a hang from
// lasting) and stops p.
func runUntilDrained(t *testing.T, ctx context.Context, db *testdb.DB, p *worker.Pool) {
	t.Helper()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("queue not drained")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
}

// TestSeenCacheMetrics counts seen-key cache results by consumer and errors by operation.
func TestSeenCacheMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	store := db.Store()
	m, err := metrics.New(store, metrics.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	store.Tracer = m
	lru, err := seen.NewLRU(seen.LRUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	store.SeenCache = lru
	c, err := inbox.New(store, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msg := inbox.Message{Consumer: "ledger", Key: "k", Kind: "credit", Payload: []byte(`{"amount":1}`)}
	for range 3 {
		if _, err := c.Receive(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	// A failed Put, told by hand.
	m.TraceEnd(m.TraceStart(ctx, txinbox.TraceStart{Op: txinbox.OpSeenPut}), txinbox.TraceEnd{Op: txinbox.OpSeenPut, Err: errors.New("down")})
	text := scrape(t, reg)
	if v := value(t, text, "txinbox_seen_cache_total", "consumer", "ledger", "result", "hit"); v != 2 {
		t.Errorf("hits %v, want 2", v)
	}
	if v := value(t, text, "txinbox_seen_cache_total", "consumer", "ledger", "result", "miss"); v != 1 {
		t.Errorf("misses %v, want 1", v)
	}
	if v := value(t, text, "txinbox_seen_cache_errors_total", "op", "put"); v != 1 {
		t.Errorf("put errors %v, want 1", v)
	}
	if v := value(t, text, "txinbox_received_total", "consumer", "ledger", "outcome", "duplicate"); v != 2 {
		t.Errorf("duplicates %v, want 2", v)
	}
}

// TestTakeoverMetrics counts the batches that never finished and the takeovers of their messages: two
// batches of a killed worker (five messages and one), taken over in groups.
func TestTakeoverMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	store := db.Store()
	m, err := metrics.New(store, metrics.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	store.Tracer = m
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []inbox.Message
	for i := range 6 {
		msgs = append(msgs, inbox.Message{Consumer: "ledger", Key: fmt.Sprint("m-", i), Kind: "credit", Payload: []byte(`{"amount":1}`)})
	}
	rs, err := client.ReceiveMany(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	// A killed worker's two batches: the first five messages, and the last one alone. Their
	// transaction rolled back (as when its process died).
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid string
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`INSERT INTO {schema}.inbox_batch (consumer, xid, ids, owner)
		VALUES ('ledger', $1, ARRAY[$2, $3, $4, $5, $6]::bigint[], 'killed'), ('ledger', $1, ARRAY[$7]::bigint[], 'killed')`),
		xid, rs[0].ID, rs[1].ID, rs[2].ID, rs[3].ID, rs[4].ID, rs[5].ID); err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil })
	p, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runUntilDrained(t, ctx, db, p)
	text := scrape(t, reg)
	// The group of five is taken over in groups of three and two, the last message alone.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"txinbox_takeovers_total", []string{"alone", "false"}, 2},
		{"txinbox_takeovers_total", []string{"alone", "true"}, 1},
		{"txinbox_taken_over_messages_total", nil, 6},
		{"txinbox_unfinished_batches_total", nil, 2},
	} {
		if v := value(t, text, c.name, append([]string{"consumer", "ledger"}, c.labels...)...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", text)
	}
}

// A runner whose Store's Tracer is Metrics counts its maintainer too: the leader gauge is 1 for that
// maintainer while it leads and 0 after the runner stops, and its jobs' runs are counted.
func TestMaintainerMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	store := db.Store()
	m, err := metrics.New(store, metrics.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	store.Tracer = m
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil })
	p, err := runner.New(store, runner.Config{
		Pools: []worker.Config{{Consumer: "ledger", Handlers: hs}},
		Owner: "pool-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	leader := func() float64 {
		return value(t, scrape(t, reg), "txinbox_maintainer_leader", "schema", db.Schema, "owner", "pool-1")
	}
	deadline := time.Now().Add(time.Minute)
	for leader() != 1 || value(t, scrape(t, reg), "txinbox_maintenance_runs_total", "job", "rollup", "outcome", "ok") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no leader gauge or roll-up run:\n%s", scrape(t, reg))
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if v := leader(); v != 0 {
		t.Fatalf("txinbox_maintainer_leader = %v after Stop, want 0", v)
	}
}
