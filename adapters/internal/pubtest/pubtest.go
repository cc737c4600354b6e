// Package pubtest holds what the tests of the outbox publishers share: a real outbox on a real
// PostgreSQL (internal/testkit/testdb) with a relay over it, and the four checks every publisher runs
// against its broker: [Deliver] (a committed transaction's events arrive, each under its id as the
// broker's dedup field, a key's in commit order, headers and trace context unchanged, in a CloudEvents
// envelope that a receiver of the CloudEvents SDK reads; a rolled-back one's never), [Acknowledgment]
// (an event the broker refuses is retried, never recorded as sent), [ContextEnd] (when a call's ctx
// ends part-way, the events the broker did not acknowledge fail with ctx's error, never recorded as
// sent) and [Pair] (the package's own sink, configured with nothing but where to store, takes each
// event's id, kind, ordering key and trace context from its envelope). A test of the adapters module
// fails for a publisher package that does not run each of them.
package pubtest

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
	"github.com/txinbox/txinbox/outbox"
)

// The trace context of the publishing transaction that every event the checks publish carries, as
// the W3C headers traceparent and tracestate (what a txotel.Tracer's Inject writes
// into outbox.Message.Headers), and a header of the application's.
const (
	TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	TraceState  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	AppHeader   = "x-tenant"
)

// traceContext returns the headers OpenTelemetry's W3C propagator writes for the span context of
// TraceParent and TraceState, as a publishing service's code does (txotel.Tracer.Inject).
func traceContext() map[string]string {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState(TraceState)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	h := map[string]string{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(h))
	return h
}

// checkTrace fails t unless the headers a message arrived with carry the trace context it was
// published with: the propagator reads back the same span context (trace, parent span, flags,
// state), so that the consumer's span joins the publisher's trace.
func checkTrace(t testing.TB, id string, got map[string]string) {
	t.Helper()
	carrier := propagation.MapCarrier{}
	for name, v := range got {
		carrier[strings.ToLower(name)] = v
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" ||
		!sc.IsSampled() || sc.TraceState().String() != TraceState {
		t.Errorf("event %s: the trace context read from its headers is %+v, want trace 4bf92f35…, span 00f067aa…, sampled, state %s", id, sc, TraceState)
	}
}

// Received is one message as its broker (or webhook endpoint) took it.
type Received struct {
	// ID is the broker's dedup field: the AMQP message-id, the Nats-Msg-Id header, the Kafka id
	// header, the webhook-id header.
	ID string
	// Key is the Kafka record key; "" for brokers without one.
	Key     string
	Payload []byte
	// Headers are the message's headers as the receiver read them (the broker's own included).
	Headers map[string]string
	// CloudEvent holds the CloudEvents context attributes of the message, by name, as a receiver
	// that is not txinbox's code reads them: package internal/cetest, the CloudEvents SDK's
	// protocol bindings, which also validate the event. [Deliver] requires it of every message.
	CloudEvent map[string]string
	// CloudEventErr is why that receiver could not read a valid event from the message, if it could
	// not.
	CloudEventErr error
}

// Source is the RelayConfig.Source of the relays of [Deliver] and [Pair]: the CloudEvents source of
// their events.
const Source = "urn:txinbox:pubtest"

// Env is one test's outbox: a migrated schema of its own and a Client on it.
type Env struct {
	DB     *testdb.DB
	Client *outbox.Client
}

// New returns an Env for t.
func New(t testing.TB) *Env {
	t.Helper()
	db := testdb.New(t)
	c, err := outbox.New(db.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{DB: db, Client: c}
}

// Publish publishes msgs in one transaction, which it commits if commit is true and rolls back
// otherwise, and returns their ids.
func (e *Env) Publish(t testing.TB, commit bool, msgs ...outbox.Message) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := e.DB.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids, err := e.Client.Publish(ctx, tx, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Result is one recorded attempt of a relay, as its Store's Tracer is told of it (txinbox.OpRelayed).
type Result struct {
	EventID string
	Attempt int
	Outcome txinbox.Outcome
	Err     error
}

// Results is a Store's Tracer that keeps every recorded attempt of a relay (txinbox.OpRelayed), and
// the events as the relay first handed them over to its Publisher.
type Results struct {
	mu     sync.Mutex
	all    []Result
	handed map[string]outbox.Event // by id
}

// handOver keeps the events of a Publish call that are handed over for the first time.
func (r *Results) handOver(events []outbox.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handed == nil {
		r.handed = map[string]outbox.Event{}
	}
	for _, ev := range events {
		if _, ok := r.handed[ev.ID]; !ok {
			r.handed[ev.ID] = ev
		}
	}
}

type startKey struct{}

// TraceStart implements txinbox.OperationTracer.
func (r *Results) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	if d.Op != txinbox.OpRelayed {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, d)
}

// TraceEnd implements txinbox.OperationTracer.
func (r *Results) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	s, ok := ctx.Value(startKey{}).(txinbox.TraceStart)
	if !ok || d.Op != txinbox.OpRelayed || len(s.Messages) != 1 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, Result{EventID: s.Messages[0].ID, Attempt: s.Attempt, Outcome: d.Outcome, Err: d.Err})
}

// All returns the attempts recorded so far, in the order they were recorded.
func (r *Results) All() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// Of returns the attempts recorded so far of the event id.
func (r *Results) Of(id string) []Result {
	var out []Result
	for _, res := range r.All() {
		if res.EventID == id {
			out = append(out, res)
		}
	}
	return out
}

// Relay starts a relay of e's outbox with pub, fast test settings (20ms polls and backoff, up to 1000
// attempts) and mod applied, stopped when t ends, and returns its recorded attempts (the Tracer of
// its Store).
func (e *Env) Relay(t testing.TB, pub outbox.Publisher, mod func(*outbox.RelayConfig)) *Results {
	t.Helper()
	res := &Results{}
	handing := outbox.PublisherFunc(func(ctx context.Context, events []outbox.Event) error {
		res.handOver(events)
		return pub.Publish(ctx, events)
	})
	cfg := outbox.RelayConfig{Publisher: handing, PollInterval: 20 * time.Millisecond, MaxAttempts: 1000,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 20 * time.Millisecond })}
	if mod != nil {
		mod(&cfg)
	}
	store := e.DB.Store()
	store.Tracer = res
	store.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	r, err := outbox.NewRelay(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stopping the relay: %v", err)
		}
	})
	return res
}

// Row is an event's row in the outbox.
type Row struct {
	State          string
	AttemptsFailed int
	LastError      string
}

// Row returns the outbox row of the event id.
func (e *Env) Row(t testing.TB, id string) Row {
	t.Helper()
	var r Row
	var lastErr *string
	err := e.DB.Pool.QueryRow(context.Background(), e.DB.SQL(`SELECT state, attempts_failed, last_error FROM {schema}.outbox WHERE event_id = $1`), id).
		Scan(&r.State, &r.AttemptsFailed, &lastErr)
	if err != nil {
		t.Fatalf("outbox row of %s: %v", id, err)
	}
	if lastErr != nil {
		r.LastError = *lastErr
	}
	return r
}

// WaitSent waits until every event of ids is sent, failing t if one becomes dead.
func (e *Env) WaitSent(t testing.TB, ids []string) {
	t.Helper()
	adaptertest.WaitFor(t, fmt.Sprintf("%d events to be sent", len(ids)), func() bool {
		rows, err := e.DB.Pool.Query(context.Background(), e.DB.SQL(`SELECT event_id::text, state, coalesce(last_error, '') FROM {schema}.outbox WHERE event_id = ANY($1::uuid[])`), ids)
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		var id, state, lastErr string
		_, err = pgx.ForEachRow(rows, []any{&id, &state, &lastErr}, func() error {
			switch state {
			case "sent":
				sent++
			case "dead":
				t.Fatalf("event %s is dead: %s", id, lastErr)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return sent == len(ids)
	})
}

// payload is the JSON body of the n-th event the checks publish.
func payload(what string, n int) []byte {
	return fmt.Appendf(nil, `{"what": %q, "n": %d, "text": "ünïcödé \"quoted\""}`, what, n)
}

// headers returns the headers every event the checks publish carries: a trace context and an
// application header.
func headers(n int) map[string]string {
	h := traceContext()
	h[AppHeader] = fmt.Sprintf("tenant-%d", n)
	return h
}

// Kind is the kind of the events that [Deliver] and [Pair] publish (not their topic, which is the
// default kind).
const Kind = "order.placed"

// contentType is the content type of the n-th event the checks publish: outbox.DefaultContentType,
// or every other one a JSON media type with a parameter.
func contentType(n int) string {
	if n%2 == 0 {
		return ""
	}
	return "application/json;charset=utf-8"
}

// handedOver returns the event id as the relay of res handed it over (its first hand-over, of an
// attempt that was recorded).
func handedOver(t testing.TB, res *Results, id string) outbox.Event {
	t.Helper()
	if len(res.Of(id)) == 0 {
		t.Fatalf("event %s arrived, but the relay recorded no attempt of it", id)
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	return res.handed[id]
}

// checkEnvelope fails t unless the CloudEvents attributes r arrived with are those of ev's
// envelope: specversion, id, source, type, time, datacontenttype, partitionkey (when ev has a key),
// traceparent and tracestate (its trace context), and no other.
func checkEnvelope(t testing.TB, r Received, ev outbox.Event) {
	t.Helper()
	if r.CloudEventErr != nil {
		t.Errorf("event %s: a CloudEvents receiver cannot read it: %v", r.ID, r.CloudEventErr)
		return
	}
	if r.CloudEvent == nil {
		t.Fatalf("event %s: the harness read no CloudEvents attributes (Received.CloudEvent): read the message with internal/cetest", r.ID)
	}
	want := map[string]string{
		envelope.AttrSpecVersion: "1.0", envelope.AttrID: ev.ID, envelope.AttrSource: Source, envelope.AttrType: Kind,
		envelope.AttrTime: ev.CreatedAt.UTC().Format(time.RFC3339Nano), envelope.AttrDataContentType: cmp.Or(ev.ContentType, "?"),
		envelope.AttrTraceParent: TraceParent, envelope.AttrTraceState: TraceState,
	}
	if ev.Key != "" {
		want[envelope.AttrPartitionKey] = ev.Key
	}
	if ev.Source != Source || ev.Kind != Kind || ev.ContentType == "" {
		t.Fatalf("event %s was handed over with source %q, kind %q, content type %q: want %q, %q and one", ev.ID, ev.Source, ev.Kind, ev.ContentType, Source, Kind)
	}
	if !maps.Equal(r.CloudEvent, want) {
		t.Errorf("event %s arrived with the CloudEvents attributes\n%v\nwant\n%v", r.ID, r.CloudEvent, want)
	}
}

// DeliverHarness is what a publisher's test gives [Deliver].
type DeliverHarness struct {
	// Publisher is the publisher under test, sending the events of Topic to where Received reads.
	Publisher outbox.Publisher
	// Topic is the events' topic: one the broker takes (a queue's routing key, a subject of a
	// stream, a topic of the cluster, a webhook endpoint's).
	Topic string
	// Received returns every message that arrived so far, in the order of arrival (for Kafka: in
	// each partition's order).
	Received func() []Received
	// RecordKey says that the broker carries the event's Key as the record key (Kafka): each
	// message's Received.Key is then checked.
	RecordKey bool
	// Check, if set, checks the broker's own fields of a message r that arrived for the event ev
	// (as the relay handed it over): the AMQP type, content-type and timestamp properties, say.
	Check func(t testing.TB, r Received, ev outbox.Event)
}

// Deliver checks a publisher through a real relay over a real outbox: the events of committed
// transactions (three keys, several events per key and per transaction, and events without a key,
// some published before the relay starts and some while it runs) each arrive at least once, under
// their event id as the broker's dedup field, with their payload byte for byte and their headers
// (trace context included) unchanged, in a CloudEvents envelope (Received.CloudEvent, as the SDK
// reads it): specversion 1.0, id, source (the relay's Source), type (the event's kind), time (its
// creation), datacontenttype, partitionkey (its key, when it has one), traceparent and tracestate
// (its trace context), nothing else; the first arrivals of a key's events follow the order of the
// commits (the relay is the only writer); the events of rolled-back transactions never arrive.
func Deliver(t *testing.T, e *Env, h DeliverHarness) {
	t.Helper()
	type sent struct {
		key     string
		payload []byte
		headers map[string]string
	}
	want := map[string]sent{} // by event id
	var order []string        // committed event ids, in commit order
	n := 0
	round := func(commit bool) {
		var msgs []outbox.Message
		for _, key := range []string{"order-1", "order-2", "order-3", "order-1", ""} {
			n++
			what := "committed"
			if !commit {
				what = "rolled back"
			}
			msgs = append(msgs, outbox.Message{Topic: h.Topic, Key: key, Kind: Kind, ContentType: contentType(n), Payload: payload(what, n), Headers: headers(n)})
		}
		ids := e.Publish(t, commit, msgs...)
		if !commit {
			return
		}
		for i, id := range ids {
			want[id] = sent{key: msgs[i].Key, payload: msgs[i].Payload, headers: msgs[i].Headers}
			order = append(order, id)
		}
	}
	for i := range 4 {
		round(i != 1)
	}
	res := e.Relay(t, h.Publisher, func(c *outbox.RelayConfig) { c.Source = Source })
	for i := range 4 {
		round(i != 2)
	}
	e.WaitSent(t, order)
	if got := e.DB.Count(t, `SELECT count(*) FROM {schema}.outbox`); got != int64(len(order)) {
		t.Errorf("the outbox holds %d events, want the %d committed ones", got, len(order))
	}

	var got []Received
	adaptertest.WaitFor(t, "every sent event to arrive", func() bool {
		got = h.Received()
		seen := map[string]bool{}
		for _, r := range got {
			if _, ok := want[r.ID]; !ok { // it will not become right by waiting
				t.Fatalf("a message arrived under id %q, which no committed event has (payload %s, headers %v)", r.ID, r.Payload, r.Headers)
			}
			seen[r.ID] = true
		}
		for _, id := range order {
			if !seen[id] {
				return false
			}
		}
		return true
	})
	first := map[string]bool{}
	arrivals := map[string][]string{} // key → first arrivals of its events
	for _, r := range got {
		w := want[r.ID]
		if string(r.Payload) != string(w.payload) {
			t.Errorf("event %s arrived with payload %s, want %s", r.ID, r.Payload, w.payload)
		}
		for name, v := range w.headers {
			if r.Headers[name] != v {
				t.Errorf("event %s arrived with header %s = %q, want %q (headers %v)", r.ID, name, r.Headers[name], v, r.Headers)
			}
		}
		checkTrace(t, r.ID, r.Headers)
		ev := handedOver(t, res, r.ID)
		checkEnvelope(t, r, ev)
		if h.Check != nil {
			h.Check(t, r, ev)
		}
		if h.RecordKey && r.Key != w.key {
			t.Errorf("event %s arrived with record key %q, want %q", r.ID, r.Key, w.key)
		}
		if !first[r.ID] {
			first[r.ID] = true
			arrivals[w.key] = append(arrivals[w.key], r.ID)
		}
	}
	for key, ids := range arrivals {
		if key == "" {
			continue
		}
		var wantIDs []string
		for _, id := range order {
			if want[id].key == key {
				wantIDs = append(wantIDs, id)
			}
		}
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("key %s: events arrived in the order %v, want the commit order %v", key, ids, wantIDs)
		}
	}
	t.Logf("%d events committed, %d messages arrived (%d keys)", len(order), len(got), len(slices.Collect(maps.Keys(arrivals))))
}

// AckHarness is what a publisher's test gives [Acknowledgment].
type AckHarness struct {
	// Publisher is the publisher under test, sending the events of Topic.
	Publisher outbox.Publisher
	// Topic is the events' topic.
	Topic string
	// Refuse makes the broker refuse every event of Topic (a RabbitMQ nack, no JetStream stream for
	// the subject, failed Kafka produce requests, a 503 from the webhook endpoint). Acknowledgment
	// calls it before it publishes anything.
	Refuse func()
	// Accept makes the broker take the events of Topic again.
	Accept func()
	// Received returns every message the broker took so far (Acknowledgment calls it only after
	// Accept).
	Received func() []Received
	// Relay, if set, adjusts the relay's configuration (a shorter Timeout, say).
	Relay func(*outbox.RelayConfig)
}

// Acknowledgment checks a publisher's acknowledgment rule through a real relay: while its broker
// refuses the events (Refuse), every attempt fails and is retried, and no event is recorded as sent;
// once the broker takes them again (Accept), each is sent and arrives under its id. A publisher that
// reported an event acknowledged without the broker's acknowledgment would have it recorded sent
// while the broker refused it, and the event would never arrive.
func Acknowledgment(t *testing.T, e *Env, h AckHarness) {
	t.Helper()
	h.Refuse()
	var msgs []outbox.Message
	for i, key := range []string{"acct-1", "acct-2", "acct-1", ""} {
		msgs = append(msgs, outbox.Message{Topic: h.Topic, Key: key, Payload: payload("refused first", i), Headers: headers(i)})
	}
	ids := e.Publish(t, true, msgs...)
	res := e.Relay(t, h.Publisher, h.Relay)
	for _, id := range []string{ids[0], ids[1], ids[3]} { // ids[2] waits behind ids[0], its key's
		adaptertest.WaitFor(t, "two failed attempts of each event while the broker refuses", func() bool {
			r := e.Row(t, id)
			return r.AttemptsFailed >= 2 || r.State != "pending" // not pending: the check below fails
		})
	}
	for i, id := range ids {
		if r := e.Row(t, id); r.State != "pending" {
			t.Fatalf("event %d (%s) is %s while the broker refuses every event: the publisher acknowledged what the broker did not (last error %q)", i, id, r.State, r.LastError)
		}
	}
	for _, r := range res.All() {
		if r.Outcome != txinbox.OutcomeRetry || r.Err == nil {
			t.Fatalf("attempt of event %s while the broker refuses: outcome %s, error %v; want a retried failure", r.EventID, r.Outcome, r.Err)
		}
	}
	t.Logf("while refused: %d failed attempts, e.g. %v", len(res.All()), res.All()[0].Err)

	h.Accept()
	e.WaitSent(t, ids)
	adaptertest.WaitFor(t, "every event to arrive once the broker takes them", func() bool {
		seen := map[string]bool{}
		for _, r := range h.Received() {
			if !slices.Contains(ids, r.ID) {
				t.Fatalf("a message arrived under id %q, which no event has", r.ID)
			}
			seen[r.ID] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
		return true
	})
}
