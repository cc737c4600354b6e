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
// [OperationTracer] is told about every receive, handler call, publish and relay hand-over.
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

// OperationTracer is the optional hook interface of a [Tracer]: a Store's Tracer that implements it
// is told when each operation starts and ends.
//
// TraceStart is called when an operation starts; the operation runs with the context it returns
// (for OpHandle, the handler's ctx derives from it). TraceEnd is called exactly once for each
// TraceStart, when that operation ends, with the context TraceStart returned and the same Op.
type OperationTracer interface {
	TraceStart(ctx context.Context, data TraceStart) context.Context
	TraceEnd(ctx context.Context, data TraceEnd)
}

// Op names an operation an [OperationTracer] is told about.
type Op string

// The operations.
const (
	// OpReceive: a receive call of an inbox Client (Receive, ReceiveTx, ReceiveMany, ReceiveManyTx;
	// a broker adapter's batch is one call).
	OpReceive Op = "receive"
	// OpHandle: a call of a worker pool's handler: a single message, or a batch handler's messages of
	// one call.
	OpHandle Op = "handle"
	// OpPublish: an outbox.Client.Publish call, which writes events into the outbox in the caller's
	// transaction. The trace context of the context TraceStart returns is the one recorded with the
	// events (Tracer.Inject): the relay's hand-over of each event continues that trace.
	OpPublish Op = "publish"
	// OpRelay: one event's hand-over by an outbox relay to its Publisher. The context TraceStart
	// returns is injected into the event's headers (Tracer.Inject), so that the event crosses the
	// broker with the trace context of its hand-over.
	OpRelay Op = "relay"
)

// TraceMessage is one message or event as the tracing hooks see it. Headers are its stored headers,
// which hold its sender's trace context (traceparent, tracestate) when the sender recorded one; the
// hooks must not modify them.
type TraceMessage struct {
	ID      string // the inbox message's key, or the outbox event's id ("" in a publish: not drawn yet)
	Kind    string
	Topic   string // the outbox event's topic; "" for an inbox message
	Headers map[string]string
}

// TraceStart describes an operation that starts. Which fields are set depends on Op.
type TraceStart struct {
	Op Op
	// Consumer is, for OpReceive, the consumer of the call's first message; for OpHandle, the pool's
	// consumer. "" for OpPublish and OpRelay.
	Consumer string
	// Messages are the operation's messages, in order: for OpReceive and OpPublish, the call's (for
	// OpPublish, with their topics and kinds, the caller's headers and no ID); for OpHandle, the
	// messages the handler call is given (one for a single handler; all of one kind); for OpRelay,
	// the one event handed over (its headers carry the trace context recorded by Publish).
	Messages []TraceMessage
	// Attempt is, for OpHandle and OpRelay, the attempt's number, from 1 (for a batch handler call,
	// its first message's). 0 for the others.
	Attempt int
	// OrderingKey is, for OpHandle, the single message's ordering key ("" for none or for a batch
	// handler call); for OpRelay, the event's key ("" for none).
	OrderingKey string
	// Batch reports, for OpHandle, a batch handler's call (worker.HandleBatch).
	Batch bool
}

// TraceEnd describes how an operation ended. Which fields are set depends on Op.
type TraceEnd struct {
	// Op is the operation's, as its TraceStart said.
	Op Op
	// Outcome is, for OpHandle, OutcomeCompleted, OutcomeRetry or OutcomeDead ("" for a batch
	// handler call, whose messages' outcomes may differ); for OpRelay, OutcomeSent, OutcomeRetry or
	// OutcomeDead, or "released" for an event handed back because the relay stopped. "" for
	// OpReceive and OpPublish.
	Outcome Outcome
	// Reason is, for OpHandle, why the call failed ("" when it did not; see worker.Reason).
	Reason string
	// Inserted, Duplicates and Conflicts count, for OpReceive, the call's messages that were
	// inserted, duplicates or conflicts.
	Inserted, Duplicates, Conflicts int
	// EventIDs are, for OpPublish, the ids of the events written, in order. The events exist only if
	// the caller's transaction commits.
	EventIDs []string
	// Err is the error that failed the operation: the receive or publish call's, the handler's, or
	// the Publisher's for the event; nil when it did not fail.
	Err error
}
