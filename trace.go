package txinbox

import "context"

// Tracer carries a trace from one service to the next and is told when txinbox's operations start
// and end. Give it once, as [Store.Tracer]: every component made from the Store uses it. Package
// github.com/txinbox/txinbox/txotel implements it with OpenTelemetry; txinbox itself depends on no
// tracing library.
//
// Inject is the one method every Tracer has: outbox.Client.Publish calls it to record the caller's
// trace context with each event it writes, and the outbox relay calls it to send each event with
// the context of its hand-over (the traceparent and tracestate of the CloudEvents envelope). The
// operations' hooks are optional, as pgx's tracers are: a Tracer that also implements
// [ReceiveTracer], [HandleTracer], [PublishTracer] or [RelayTracer] is told about those operations.
//
// Every method must be safe for concurrent use and fast: the hooks run on the operations' paths.
type Tracer interface {
	// Inject writes the trace context of ctx into headers, under the W3C Trace Context names
	// "traceparent" and "tracestate" ([HeaderTraceParent], [HeaderTraceState]); without a valid
	// trace context in ctx it writes nothing. headers is never nil.
	Inject(ctx context.Context, headers map[string]string)
}

// The W3C Trace Context header names, under which a [Tracer] writes a trace context into message
// and event headers and reads it back.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// TraceMessage is one message or event as the tracing hooks see it. Headers are its stored headers,
// which hold its sender's trace context (traceparent, tracestate) when the sender recorded one; the
// hooks must not modify them.
type TraceMessage struct {
	ID      string // the inbox message's key, or the outbox event's id
	Kind    string
	Headers map[string]string
}

// ReceiveTracer is told about each receive call of an inbox Client (Receive, ReceiveTx, ReceiveMany,
// ReceiveManyTx; a broker adapter's batch is one call).
type ReceiveTracer interface {
	// TraceReceiveStart is called when the call starts; the call runs with the context it returns.
	TraceReceiveStart(ctx context.Context, data TraceReceiveStartData) context.Context
	// TraceReceiveEnd is called once when the call returns, with the context TraceReceiveStart
	// returned.
	TraceReceiveEnd(ctx context.Context, data TraceReceiveEndData)
}

// TraceReceiveStartData describes a receive call: the consumer of its first message and its
// messages, in order.
type TraceReceiveStartData struct {
	Consumer string
	Messages []TraceMessage
}

// TraceReceiveEndData is the end of a receive call: how many of its messages were inserted,
// duplicates or conflicts, or the error that failed it.
type TraceReceiveEndData struct {
	Inserted, Duplicates, Conflicts int
	Err                             error
}

// HandleTracer is told about each call of a worker pool's handler: a single message, or a batch
// handler's messages of one call.
type HandleTracer interface {
	// TraceHandleStart is called before the handler runs; the handler's ctx derives from the context
	// it returns.
	TraceHandleStart(ctx context.Context, data TraceHandleStartData) context.Context
	// TraceHandleEnd is called once the call's outcome is known, with the context TraceHandleStart
	// returned.
	TraceHandleEnd(ctx context.Context, data TraceHandleEndData)
}

// TraceHandleStartData describes a handler call: the pool's consumer, the kind, and the messages the
// call is given (one for a single handler). Attempt is the attempt's number, from 1 (the first
// message's, for a batch); OrderingKey is the single message's ordering key ("" for none or for a
// batch); Batch says whether the handler is a batch handler.
type TraceHandleStartData struct {
	Consumer    string
	Kind        string
	Messages    []TraceMessage
	Attempt     int
	OrderingKey string
	Batch       bool
}

// TraceHandleEndData is the outcome of a handler call: Outcome "completed", "retry" or "dead"
// (empty for a batch call, whose messages' outcomes may differ), Reason why it failed ("" when it
// did not; see worker.Reason), and Err, the handler's error or nil.
type TraceHandleEndData struct {
	Outcome string
	Reason  string
	Err     error
}

// PublishTracer is told about each outbox.Client.Publish call, which writes events into the outbox
// in the caller's transaction. The trace context of the context TracePublishStart returns is the
// one recorded with the events (Tracer.Inject): the relay's hand-over of each event continues that
// trace.
type PublishTracer interface {
	TracePublishStart(ctx context.Context, data TracePublishStartData) context.Context
	TracePublishEnd(ctx context.Context, data TracePublishEndData)
}

// TracePublishStartData describes a Publish call: its events, with their topics and kinds (their
// IDs are drawn by the call and not known yet).
type TracePublishStartData struct {
	Topics []string
	Kinds  []string
}

// TracePublishEndData is the end of a Publish call: the ids of the events written, in order, or the
// error. The events exist only if the caller's transaction commits.
type TracePublishEndData struct {
	EventIDs []string
	Err      error
}

// RelayTracer is told about each event an outbox relay hands to its Publisher. The context
// TraceRelayStart returns is injected into the event's headers (Tracer.Inject), so that the
// event crosses the broker with the trace context of its hand-over.
type RelayTracer interface {
	TraceRelayStart(ctx context.Context, data TraceRelayStartData) context.Context
	TraceRelayEnd(ctx context.Context, data TraceRelayEndData)
}

// TraceRelayStartData describes one event's hand-over: the event (its headers carry the trace
// context recorded by Publish), its topic, ordering key and attempt number, from 1.
type TraceRelayStartData struct {
	Event   TraceMessage
	Topic   string
	Key     string
	Attempt int
}

// TraceRelayEndData is the outcome of a hand-over: "sent", "retry" or "dead", and the Publisher's
// error for the event (nil when sent). An event handed back because the relay stopped has Outcome
// "released".
type TraceRelayEndData struct {
	Outcome string
	Err     error
}
