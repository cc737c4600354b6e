package txotel_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/txotel"
	"github.com/txinbox/txinbox/worker"
)

// chain is two services on one database, each in a schema of its own and with a Tracer of the same
// in-memory span recorder: "orders" publishes events through its outbox, its relay hands them to a
// Publisher that receives them into the inbox of "billing" (the broker hop, as a sink would: the
// event's id as the key, its kind, its headers), and billing's pool handles them.
type chain struct {
	spans           *tracetest.SpanRecorder
	tp              *sdktrace.TracerProvider
	orders, billing *testdb.DB
	out             *outbox.Client
	relay           *outbox.Relay
	pool            *worker.Pool
	mu              sync.Mutex
	handled         map[string]trace.SpanContext // event id → the handler's span context
	published       int
}

func newChain(t *testing.T) *chain {
	t.Helper()
	c := &chain{spans: tracetest.NewSpanRecorder(), handled: map[string]trace.SpanContext{}}
	c.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(c.spans))
	tr := txotel.New(txotel.Config{TracerProvider: c.tp})
	c.orders, c.billing = testdb.New(t), testdb.New(t)
	ordersStore, billingStore := c.orders.Store(), c.billing.Store()
	ordersStore.Tracer, billingStore.Tracer = tr, tr
	var err error
	if c.out, err = outbox.New(ordersStore, outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(billingStore, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pub := outbox.PublisherFunc(func(ctx context.Context, events []outbox.Event) error {
		msgs := make([]inbox.Message, len(events))
		for i, ev := range events {
			msgs[i] = inbox.Message{Consumer: "billing", Key: ev.ID, Kind: ev.Kind, Payload: ev.Payload, Headers: ev.Headers}
		}
		_, err := in.ReceiveMany(context.Background(), msgs) // the consumer's own context: a broker in between
		c.mu.Lock()
		c.published += len(events)
		c.mu.Unlock()
		return err
	})
	if c.relay, err = outbox.NewRelay(ordersStore, outbox.RelayConfig{Publisher: pub, PollInterval: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "order.created", func(ctx context.Context, tx pgx.Tx, m *worker.Message[json.RawMessage]) error {
		c.mu.Lock()
		c.handled[m.Key] = trace.SpanContextFromContext(ctx)
		c.mu.Unlock()
		return nil
	})
	if c.pool, err = worker.New(billingStore, worker.Config{Consumer: "billing", Handlers: hs, PollInterval: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.pool.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.relay.Stop(sctx)
		_ = c.pool.Stop(sctx)
	})
	return c
}

// publish publishes one event in a transaction under a span of its own ("POST /orders"), commits or
// rolls it back, and returns the span's context and the event's id.
func (c *chain) publish(t *testing.T, commit bool) (trace.SpanContext, string) {
	t.Helper()
	ctx, span := c.tp.Tracer("orders").Start(context.Background(), "POST /orders")
	defer span.End()
	tx, err := c.orders.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids, err := c.out.Publish(ctx, tx, outbox.Message{Topic: "orders", Kind: "order.created", Key: "acct-1", Payload: []byte(`{"n":1}`)})
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
	return span.SpanContext(), ids[0]
}

// waitHandled waits until the event id was handled and returns its handler's span context.
func (c *chain) waitHandled(t *testing.T, id string) trace.SpanContext {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		sc, ok := c.handled[id]
		c.mu.Unlock()
		if ok {
			return sc
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("event %s not handled within 30 s", id)
	return trace.SpanContext{}
}

// TestOneTraceFromPublishToHandler: the handler span in the second service belongs to the trace of
// the request that published the event in the first, through the publish span, the relay's span
// (whose context crossed the hop in the event's headers) and the handle span, each the parent of the
// next; the receive span in between is linked to the relay's span.
func TestOneTraceFromPublishToHandler(t *testing.T) {
	t.Parallel()
	c := newChain(t)
	root, id := c.publish(t, true)
	handler := c.waitHandled(t, id)
	if handler.TraceID() != root.TraceID() {
		t.Fatalf("the handler's span is in trace %s, want the publishing request's trace %s", handler.TraceID(), root.TraceID())
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var receive sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range c.spans.Ended() {
			byID[s.SpanContext().SpanID()] = s
			if s.Name() == "txinbox.receive" {
				receive = s
			}
		}
		if _, ok := byID[handler.SpanID()]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The handler's ancestry, up to the request.
	var names []string
	for sid := handler.SpanID(); sid != root.SpanID(); {
		s, ok := byID[sid]
		if !ok {
			t.Fatalf("span %s of the handler's ancestry was not recorded (ancestry so far: %v)", sid, names)
		}
		names = append(names, s.Name())
		if s.SpanContext().TraceID() != root.TraceID() {
			t.Fatalf("span %s (%s) is in trace %s, want %s", s.Name(), sid, s.SpanContext().TraceID(), root.TraceID())
		}
		sid = s.Parent().SpanID()
	}
	if want := []string{"txinbox.handle", "txinbox.relay", "txinbox.publish"}; !slices.Equal(names, want) {
		t.Errorf("the handler's ancestry up to the request is %v, want %v", names, want)
	}
	if receive == nil {
		t.Fatal("no txinbox.receive span")
	}
	relay := byID[byID[handler.SpanID()].Parent().SpanID()]
	if len(receive.Links()) != 1 || receive.Links()[0].SpanContext.SpanID() != relay.SpanContext().SpanID() {
		t.Errorf("the receive span's links are %v, want one to the relay's span %s", receive.Links(), relay.SpanContext().SpanID())
	}
}

// TestRolledBackPublishLeavesNothing: an event published in a transaction that rolls back is never
// handed over: no relay span, no receive or handler span links to its trace, nothing is published.
// The publish span itself ended when Publish returned, as the call did happen.
func TestRolledBackPublishLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newChain(t)
	rolledBack, _ := c.publish(t, false)
	_, id := c.publish(t, true) // a later event goes through: the relay ran past the rolled-back one
	c.waitHandled(t, id)
	c.mu.Lock()
	published := c.published
	c.mu.Unlock()
	if published != 1 {
		t.Errorf("%d events published, want 1 (the committed one)", published)
	}
	for _, s := range c.spans.Ended() {
		inTrace := s.SpanContext().TraceID() == rolledBack.TraceID()
		for _, l := range s.Links() {
			inTrace = inTrace || l.SpanContext.TraceID() == rolledBack.TraceID()
		}
		if inTrace && s.Name() != "POST /orders" && s.Name() != "txinbox.publish" {
			t.Errorf("span %s belongs or links to the trace of the rolled-back publish", s.Name())
		}
	}
}
