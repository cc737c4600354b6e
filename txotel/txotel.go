// Package txotel traces txinbox with OpenTelemetry: a [Tracer] is the txinbox.OperationTracer of a
// Store (txinbox.Store.Tracer), and every component made from that Store reports to it.
//
//	tr := txotel.New(txotel.Config{TracerProvider: tp})
//	store := txinbox.Store{DB: pool, Schema: "orders", Tracer: tr}
//
// With metrics as well, combine them (txinbox.Tracers): store.Tracer = txinbox.Tracers(tr, m), m a
// *metrics.Metrics. The Tracer is also a txinbox.Injector: it records the trace context with the
// events and messages it crosses services with.
//
// One trace runs from a request in one service to the handler in the next:
//
//	txinbox.publish        (producer) outbox.Client.Publish, a child of the caller's span; its trace
//	                       context is recorded with each event (headers traceparent, tracestate)
//	txinbox.relay          (producer) one event's hand-over to the relay's Publisher, a child of the
//	                       context recorded with the event; the event is sent with this span's context
//	                       (the traceparent and tracestate of its CloudEvents envelope)
//	txinbox.receive        (consumer) a receive call of an inbox Client (a broker adapter's batch), a
//	                       child of the caller's context, linked to the trace context each message
//	                       arrived with; a message that arrived with none is stored with this span's
//	                       context
//	txinbox.handle         (consumer) a handler call, a child of the trace context stored with its
//	                       message: the relay's span, for an event of a txinbox outbox
//	txinbox.handle_batch   (consumer) a batch handler call, linked to each message's trace context
//
// So a handler's span is a descendant of the publishing request's span, across the broker; the
// receive spans hang off the consumer's own context and are linked into the senders' traces. The
// other operations (txinbox.OpSeenGet, OpHandled, OpRelayed, OpLead, OpJob, ...) make no span: the
// Tracer ignores them (what they report is package metrics' to count).
package txotel

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox"
)

// Config configures a Tracer. The zero value is valid.
type Config struct {
	// TracerProvider makes the spans. Default: otel.GetTracerProvider() (no spans unless the
	// application installs a provider; the trace context still crosses services).
	TracerProvider trace.TracerProvider
	// Propagator writes a trace context into headers and reads it back. Default:
	// propagation.TraceContext{} (W3C traceparent and tracestate, the names the CloudEvents envelope
	// carries).
	Propagator propagation.TextMapPropagator
}

// maxLinks bounds the links of one span (a receive or batch handler call of many messages).
const maxLinks = 128

// Tracer is a txinbox.OperationTracer that makes OpenTelemetry spans (see the package documentation)
// and a txinbox.Injector. It is safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

var (
	_ txinbox.OperationTracer = (*Tracer)(nil)
	_ txinbox.Injector        = (*Tracer)(nil)
)

// New returns a Tracer.
func New(cfg Config) *Tracer {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	return &Tracer{tracer: cfg.TracerProvider.Tracer("github.com/txinbox/txinbox/txotel"), prop: cfg.Propagator}
}

// Inject implements txinbox.Injector: it writes the trace context of ctx into headers with the
// Propagator.
func (t *Tracer) Inject(ctx context.Context, headers map[string]string) {
	t.prop.Inject(ctx, propagation.MapCarrier(headers))
}

// extract returns ctx carrying the trace context of headers (names matched without regard to case,
// as brokers and HTTP may change it), or ctx if they hold none.
func (t *Tracer) extract(ctx context.Context, headers map[string]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return t.prop.Extract(ctx, foldCarrier(headers))
}

// remote returns the span context that headers carry; it is not valid if they carry none.
func (t *Tracer) remote(headers map[string]string) trace.SpanContext {
	return trace.SpanContextFromContext(t.extract(context.Background(), headers))
}

// links returns a link to the trace context of each message that carries one, at most maxLinks.
func (t *Tracer) links(msgs []txinbox.TraceMessage) []trace.Link {
	var links []trace.Link
	for _, m := range msgs {
		if len(links) == maxLinks {
			break
		}
		if sc := t.remote(m.Headers); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}

// TraceStart implements txinbox.OperationTracer: it starts the operation's span (see the package
// documentation) and returns ctx carrying it.
//
//   - OpReceive: a "txinbox.receive" span, a child of ctx, linked to the trace context of each
//     message that carries one;
//   - OpHandle: a "txinbox.handle" span whose parent is the trace context in the message's headers
//     (ctx's span if there is none), or, for a batch handler, a "txinbox.handle_batch" span, a child
//     of ctx linked to each message's trace context;
//   - OpPublish: a "txinbox.publish" span, a child of ctx, whose context is recorded with the events;
//   - OpRelay: a "txinbox.relay" span, a child of the trace context recorded with the event (ctx's
//     span if there is none).
//
// Every other Op starts no span: ctx is returned as it is.
func (t *Tracer) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	switch d.Op {
	case txinbox.OpReceive:
		return t.receiveStart(ctx, d)
	case txinbox.OpHandle:
		return t.handleStart(ctx, d)
	case txinbox.OpPublish:
		return t.publishStart(ctx, d)
	case txinbox.OpRelay:
		return t.relayStart(ctx, d)
	}
	return ctx
}

// TraceEnd implements txinbox.OperationTracer: it ends the span TraceStart started, with the
// operation's outcome as its attributes and an error status if it failed. For an Op TraceStart
// starts no span for, it does nothing.
func (t *Tracer) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	span := trace.SpanFromContext(ctx)
	switch d.Op {
	case txinbox.OpReceive:
		if span.IsRecording() {
			var inserted, duplicates, conflicts int
			for _, r := range d.Results {
				switch r {
				case "inserted":
					inserted++
				case "duplicate":
					duplicates++
				case "conflict":
					conflicts++
				}
			}
			span.SetAttributes(attribute.Int("txinbox.inserted", inserted), attribute.Int("txinbox.duplicates", duplicates),
				attribute.Int("txinbox.conflicts", conflicts))
		}
	case txinbox.OpHandle:
		if span.IsRecording() {
			if d.Outcome != "" {
				span.SetAttributes(attribute.String("txinbox.outcome", string(d.Outcome)))
			}
			if d.Reason != "" {
				span.SetAttributes(attribute.String("txinbox.reason", d.Reason))
			}
		}
	case txinbox.OpPublish:
		if span.IsRecording() && len(d.EventIDs) == 1 {
			span.SetAttributes(attribute.String("messaging.message.id", d.EventIDs[0]))
		}
	case txinbox.OpRelay:
		if span.IsRecording() {
			span.SetAttributes(attribute.String("txinbox.outcome", string(d.Outcome)))
		}
	default:
		return // TraceStart started no span
	}
	end(span, d.Err)
}

// receiveStart starts the span of an OpReceive.
func (t *Tracer) receiveStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	ctx, span := t.tracer.Start(ctx, "txinbox.receive", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(t.links(d.Messages)...))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "txinbox"),
			attribute.String("messaging.operation.type", "receive"),
			attribute.String("messaging.consumer.group.name", d.Consumer),
			attribute.Int("messaging.batch.message_count", len(d.Messages)),
		)
		if len(d.Messages) == 1 {
			span.SetAttributes(attribute.String("messaging.message.id", d.Messages[0].ID))
		}
	}
	return ctx
}

// handleStart starts the span of an OpHandle.
func (t *Tracer) handleStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	var span trace.Span
	if d.Batch {
		ctx, span = t.tracer.Start(ctx, "txinbox.handle_batch", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithLinks(t.links(d.Messages)...))
	} else {
		if len(d.Messages) == 1 {
			ctx = t.extract(ctx, d.Messages[0].Headers)
		}
		ctx, span = t.tracer.Start(ctx, "txinbox.handle", trace.WithSpanKind(trace.SpanKindConsumer))
	}
	if span.IsRecording() {
		var kind string
		if len(d.Messages) > 0 {
			kind = d.Messages[0].Kind // every message of a call has the same kind
		}
		span.SetAttributes(
			attribute.String("messaging.system", "txinbox"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.consumer.group.name", d.Consumer),
			attribute.String("txinbox.kind", kind),
			attribute.Int("txinbox.attempt", d.Attempt),
		)
		if d.Batch {
			span.SetAttributes(attribute.Int("messaging.batch.message_count", len(d.Messages)))
		} else if len(d.Messages) == 1 {
			span.SetAttributes(attribute.String("messaging.message.id", d.Messages[0].ID))
		}
		if d.OrderingKey != "" {
			span.SetAttributes(attribute.String("txinbox.ordering_key", d.OrderingKey))
		}
	}
	return ctx
}

// publishStart starts the span of an OpPublish.
func (t *Tracer) publishStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	ctx, span := t.tracer.Start(ctx, "txinbox.publish", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "txinbox"),
			attribute.String("messaging.operation.type", "create"),
			attribute.Int("messaging.batch.message_count", len(d.Messages)),
		)
		if len(d.Messages) > 0 {
			span.SetAttributes(attribute.String("messaging.destination.name", d.Messages[0].Topic),
				attribute.String("txinbox.kind", d.Messages[0].Kind))
		}
	}
	return ctx
}

// relayStart starts the span of an OpRelay.
func (t *Tracer) relayStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	var ev txinbox.TraceMessage
	if len(d.Messages) > 0 {
		ev = d.Messages[0]
	}
	ctx = t.extract(ctx, ev.Headers)
	ctx, span := t.tracer.Start(ctx, "txinbox.relay", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "txinbox"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", ev.Topic),
			attribute.String("messaging.message.id", ev.ID),
			attribute.String("txinbox.kind", ev.Kind),
			attribute.Int("txinbox.attempt", d.Attempt),
		)
		if d.OrderingKey != "" {
			span.SetAttributes(attribute.String("txinbox.ordering_key", d.OrderingKey))
		}
	}
	return ctx
}

// end ends span, with an error status if err is not nil.
func end(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		msg := err.Error()
		if len(msg) > 1024 {
			msg = msg[:1024] + "…"
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// foldCarrier is a read-only TextMapCarrier over headers whose names it matches without regard to
// case.
type foldCarrier map[string]string

func (c foldCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (c foldCarrier) Set(string, string) {}

func (c foldCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
