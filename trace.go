package txinbox

import (
	"context"
	"reflect"
	"time"
)

// OperationTracer is txinbox's one hook for tracing and metrics: a Store's Tracer ([Store.Tracer])
// is told when each of txinbox's operations starts and ends, by every component made from that
// Store. Package github.com/txinbox/txinbox/txotel implements it with OpenTelemetry (spans), package
// github.com/txinbox/txinbox/metrics with Prometheus (counters and gauges); [Tracers] combines
// several into one. txinbox itself depends on no tracing or metrics library. The hooks follow
// pgx's tracers: small data in, a context out.
//
// TraceStart is called when an operation starts; the operation runs with the context it returns
// (for OpHandle, the handler's ctx derives from it). TraceEnd is called exactly once for each
// TraceStart, when that operation ends, with the context TraceStart returned and the same Op: a
// tracer keeps in that context what it needs of the start (a span, a start time, the labels of a
// metric). The slices and maps of a TraceStart are not modified by txinbox until its TraceEnd has
// returned, so a tracer may keep them until then; a tracer must never modify them.
//
// The events OpHandled, OpRelayed, OpCharge and OpTakeover last no time of their own: their
// TraceEnd follows their TraceStart at once.
//
// A tracer ignores the Ops it has no use for, including those a later version adds: its TraceStart
// returns ctx as it is and its TraceEnd does nothing.
//
// Every method must be safe for concurrent use and fast: the hooks run on the operations' paths.
type OperationTracer interface {
	TraceStart(ctx context.Context, data TraceStart) context.Context
	TraceEnd(ctx context.Context, data TraceEnd)
}

// Injector is the optional interface of a Store's Tracer that carries a trace from one service to
// the next (package txotel's Tracer implements it). outbox.Client.Publish calls it to record the
// caller's trace context with each event it writes, the outbox relay to send each event with the
// context of its hand-over (the traceparent and tracestate of the CloudEvents envelope), and an inbox
// Client to store a message that arrived with no trace context with that of its receive call.
//
// Inject must be safe for concurrent use and fast.
type Injector interface {
	// Inject writes the trace context of ctx into headers, under the W3C Trace Context names
	// "traceparent" and "tracestate" ([HeaderTraceParent], [HeaderTraceState]); without a valid
	// trace context in ctx it writes nothing. headers is never nil.
	Inject(ctx context.Context, headers map[string]string)
}

// The W3C Trace Context header names, under which an [Injector] writes a trace context into message
// and event headers and a tracer reads it back.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Op names an operation an [OperationTracer] is told about.
type Op string

// The operations. Every Op is declared here, in this one block (a test enumerates them from it).
const (
	// OpReceive: a receive call of an inbox Client (Receive, ReceiveTx, ReceiveMany, ReceiveManyTx;
	// a broker adapter's batch is one call).
	OpReceive Op = "receive"
	// OpSeenGet: the look-up of received messages' keys in an inbox Client's seen-key cache
	// ([Store.SeenCache]), one SeenCache.Get call: for one receive call, or for the calls of one
	// shared statement (concurrent Receive calls).
	OpSeenGet Op = "seen_get"
	// OpSeenPut: the storing of received keys in an inbox Client's seen-key cache, one SeenCache.Put
	// call, after their statement committed (or in Client.Remember).
	OpSeenPut Op = "seen_put"
	// OpSeenInvalidate: admin's invalidation of the Store's seen-key cache ([Store.SeenCache]), one
	// SeenCache.Invalidate call, after it deleted messages early.
	OpSeenInvalidate Op = "seen_invalidate"
	// OpHandle: a call of a worker pool's handler: a single message, or a batch handler's messages of
	// one call. One per call: a single handler's message called again in the same attempt (after a
	// batch-mate failed, its first call's writes rolled back) has one per call, the first one ending
	// completed; OpHandled tells its outcome once.
	OpHandle Op = "handle"
	// OpHandled: the outcome of one message's attempt, committed by a worker pool (with the handler's
	// effects, or on its own after the batch rolled back): once per message and attempt whose
	// outcome was recorded, after the commit, including the messages whose handler did not run (no
	// handler for the kind, a payload that does not decode, out of attempts after a crash). An
	// event: TraceEnd follows TraceStart at once.
	OpHandled Op = "handled"
	// OpCharge: a batch that never finished (its worker died, hung or lost its connection), charged
	// by a worker pool's rescuer: once per batch, by the pool that charged it. An event.
	OpCharge Op = "charge"
	// OpTakeover: a group of messages of such batches claimed by a worker pool's rescuer to run
	// again, before it runs. An event.
	OpTakeover Op = "takeover"
	// OpPublish: an outbox.Client.Publish call, which writes events into the outbox in the caller's
	// transaction. The trace context of the context TraceStart returns is the one recorded with the
	// events (Injector.Inject): the relay's hand-over of each event continues that trace.
	OpPublish Op = "publish"
	// OpRelay: one event's hand-over by an outbox relay to its Publisher. The context TraceStart
	// returns is injected into the event's headers (Injector.Inject), so that the event crosses the
	// broker with the trace context of its hand-over.
	OpRelay Op = "relay"
	// OpRelayed: the outcome of one event's attempt, recorded by an outbox relay: once per attempt
	// whose outcome it recorded, after the record committed; never for an attempt whose claim
	// another relay took over after its lease ended (its outcome was not recorded), nor for an event
	// handed back because the relay stopped. An event: TraceEnd follows TraceStart at once.
	OpRelayed Op = "relayed"
	// OpLead: a maintainer's leadership of its schema's maintenance (package maintain): it starts
	// when the maintainer is elected and ends when it stops leading; its jobs run within it.
	OpLead Op = "lead"
	// OpJob: one run of a maintenance job by the leading maintainer, until its end is recorded.
	OpJob Op = "job"
)

// TraceMessage is one message or event as the hooks see it. Headers are its stored headers, which
// hold its sender's trace context (traceparent, tracestate) when the sender recorded one.
type TraceMessage struct {
	ID       string // the inbox message's key, or the outbox event's id ("" in a publish: not drawn yet)
	Consumer string // the inbox message's consumer; "" for an outbox event
	Kind     string
	Topic    string // the outbox event's topic; "" for an inbox message
	Headers  map[string]string
}

// TraceStart describes an operation that starts. Which fields are set depends on Op; the others are
// zero.
type TraceStart struct {
	Op Op
	// Schema is the schema of the Store of the component that reports the operation (every Op).
	Schema string
	// Consumer is, for OpReceive, the consumer of the call's first message (each message says its
	// own); for OpHandle, OpHandled, OpCharge and OpTakeover, the pool's consumer.
	Consumer string
	// Owner is, for OpLead and OpJob, the maintainer's (maintain.Config.Owner); for OpCharge, the
	// owner of the pool that ran the batch (worker.Config.Owner).
	Owner string
	// Job is, for OpJob, the job's name (rotate, expire-keys, outbox-rotate, vacuum, analyze, health,
	// rollup, pools, or one of maintain.Config.Jobs).
	Job string
	// Messages are the operation's messages, in order: for OpReceive and OpPublish, the call's (for
	// OpPublish, with their topics and kinds, the caller's headers and no ID); for OpSeenGet, the
	// messages looked up, one for each (a key that appears twice is there twice); for OpSeenPut, one
	// message of each key stored; for OpHandle, the messages the handler call is given (one for a
	// single handler; all of one kind); for OpHandled, the message; for OpTakeover, the group's
	// messages; for OpRelay and OpRelayed, the one event (for OpRelay, its headers carry the trace
	// context recorded by Publish). nil for the others.
	Messages []TraceMessage
	// Attempt is, for OpHandle, OpHandled, OpRelay and OpRelayed, the attempt's number, from 1 (for
	// a batch handler call, its first message's).
	Attempt int
	// OrderingKey is, for OpHandle, the single message's ordering key ("" for none, and for a batch
	// handler call); for OpHandled, the message's ("" for none); for OpRelay and OpRelayed, the
	// event's key ("" for none).
	OrderingKey string
	// Batch reports, for OpHandle, a batch handler's call (worker.HandleBatch).
	Batch bool
}

// TraceEnd describes how an operation ended. Which fields are set depends on Op; the others are
// zero.
type TraceEnd struct {
	// Op is the operation's, as its TraceStart said.
	Op Op
	// Outcome is, for OpHandle and OpHandled, OutcomeCompleted, OutcomeRetry or OutcomeDead (for
	// OpHandle, "" for a batch handler call, whose messages' outcomes may differ; OpHandled has each
	// message's); for OpRelay, OutcomeSent, OutcomeRetry or OutcomeDead, or "released" for an event
	// handed back because the relay stopped; for OpRelayed, OutcomeSent, OutcomeRetry or
	// OutcomeDead.
	Outcome Outcome
	// Reason is, for OpHandle and OpHandled, why the attempt failed ("" when it did not): "error",
	// "panic", "timeout", "permanent", "decode", "unknown_kind" or "crashed" (as for Attempt.Reason,
	// which documents each); for OpLead, why the maintainer stopped leading: "stopped" (its Stop, or
	// its context ended), or why it lost the lease.
	Reason string
	// Results are, for OpReceive, the outcome of each message of TraceStart.Messages, in order:
	// "inserted", "duplicate" or "conflict" (inbox.Outcome; nil when Err is set); for OpSeenGet, what
	// the cache did for each message, in order: "hit" (answered Duplicate without the database),
	// "miss", "mismatch" (cached with another payload) or "fallback" (the cache failed or timed out);
	// all but "hit" went to the database.
	Results []string
	// EventIDs are, for OpPublish, the ids of the events written, in order. The events exist only if
	// the caller's transaction commits.
	EventIDs []string
	// Duration is, for OpHandled, the time its handler call took (0 if the handler did not run); for
	// OpRelayed, the time the Publish call took (0 if the event was not handed over: out of
	// attempts). The other Ops last from their TraceStart to their TraceEnd.
	Duration time.Duration
	// Err is the error that failed the operation, nil when it did not fail: the receive or publish
	// call's; the handler's (OpHandle), or the attempt's, as its message records it as its last error
	// (OpHandled: for reason crashed, the last error recorded before); the Publisher's for the event
	// (OpRelay, OpRelayed); the seen-key cache's (OpSeenGet, OpSeenPut, OpSeenInvalidate: a timeout,
	// or a Get that answered fewer entries than keys, included); the job's (OpJob).
	Err error
}

// Tracers returns one OperationTracer that tells each of ts about every operation, for a Store's
// Tracer that traces and counts at once:
//
//	store.Tracer = txinbox.Tracers(txotel.New(txotel.Config{}), m) // m: a *metrics.Metrics
//
// TraceStart calls them in the order of ts, each with the context the one before it returned (the
// first with the operation's), and returns the last one's; TraceEnd calls them in the reverse order,
// each with the context its own TraceStart returned. A nil entry (a nil interface or a nil pointer)
// is skipped. If any of the others implements [Injector], so does the result: its Inject calls each
// that does, in the order of ts, on the same headers. Tracers of no tracer returns nil, and of one
// returns that one.
func Tracers(ts ...OperationTracer) OperationTracer {
	m := &tracers{}
	var injectors []Injector
	for _, t := range ts {
		if t == nil {
			continue
		}
		if v := reflect.ValueOf(t); v.Kind() == reflect.Pointer && v.IsNil() {
			continue
		}
		m.ts = append(m.ts, t)
		if in, ok := t.(Injector); ok {
			injectors = append(injectors, in)
		}
	}
	switch {
	case len(m.ts) == 0:
		return nil
	case len(m.ts) == 1:
		return m.ts[0]
	case len(injectors) > 0:
		return &injectingTracers{tracers: m, injectors: injectors}
	}
	return m
}

// tracers is the OperationTracer of Tracers.
type tracers struct{ ts []OperationTracer }

// tracersKey is the context key under which a tracers keeps the contexts its members' TraceStart
// returned.
type tracersKey struct{ m *tracers }

func (m *tracers) TraceStart(ctx context.Context, d TraceStart) context.Context {
	ctxs := make([]context.Context, len(m.ts))
	for i, t := range m.ts {
		ctx = t.TraceStart(ctx, d)
		ctxs[i] = ctx
	}
	return context.WithValue(ctx, tracersKey{m}, ctxs)
}

func (m *tracers) TraceEnd(ctx context.Context, d TraceEnd) {
	ctxs, _ := ctx.Value(tracersKey{m}).([]context.Context)
	for i := len(m.ts) - 1; i >= 0; i-- {
		c := ctx
		if len(ctxs) == len(m.ts) {
			c = ctxs[i]
		}
		m.ts[i].TraceEnd(c, d)
	}
}

// injectingTracers is the OperationTracer of Tracers when some of them are Injectors.
type injectingTracers struct {
	*tracers
	injectors []Injector
}

func (m *injectingTracers) Inject(ctx context.Context, headers map[string]string) {
	for _, in := range m.injectors {
		in.Inject(ctx, headers)
	}
}
