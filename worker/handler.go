package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/typednil"
)

// Message is a claimed message handed to a handler, with its payload decoded into T.
type Message[T any] struct {
	ID          int64
	Consumer    string
	Key         string // the idempotency key: hand it on to effects outside the transaction (e-mail, HTTP)
	Kind        string
	Payload     T      // decoded from RawPayload with encoding/json
	RawPayload  []byte // the stored payload (JSON)
	Headers     map[string]string
	OrderingKey string
	// Attempt is this attempt's number, starting at 1. It counts every attempt started, including ones
	// that never finished (a crash).
	Attempt int
	// PreviousError is the error recorded by the last failed attempt, if any.
	PreviousError string
	ReceivedAt    time.Time

	result *[]byte
}

// SetResult stores v, encoded as JSON, with the message when the handler's transaction commits. A
// duplicate received later reports it (inbox.Receipt.Result). A later call replaces the result. On a
// Message built by hand (a test calling its handler directly), it keeps the result in the Message,
// where [Message.Result] reads it.
func (m *Message[T]) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("txinbox: result: %w", err)
	}
	if m.result == nil {
		m.result = new([]byte)
	}
	*m.result = b
	return nil
}

// Result returns the JSON that the last [Message.SetResult] stored, or nil if none did. It lets a test
// that calls a handler with a Message built by hand see the result the handler set.
func (m *Message[T]) Result() []byte {
	if m.result == nil {
		return nil
	}
	return *m.result
}

// HandlerFunc handles one message. Everything it writes through tx commits together with the message's
// "completed" mark, or not at all. tx supports every method of pgx.Tx: what the handler sends through
// Exec, Query, QueryRow, SendBatch, CopyFrom, Prepare, LargeObjects, and through the connection Conn
// returns, runs in a savepoint that is rolled back if the message fails (shared with the batch-mates
// that run before and after it, until one of them fails); tx.Begin gives a nested savepoint as usual.
// When a batch-mate fails, the handler may be called again in the same attempt, the writes of its
// first call rolled back: whatever it does outside tx must be safe to repeat (key it by msg.Key). It must not
// call tx.Commit or tx.Rollback (they return txinbox.ErrTxManaged), nor end the transaction any other way (a
// COMMIT or ROLLBACK statement, or Begin, Commit or pgx.BeginFunc on tx.Conn(), which would commit
// the whole batch). Returning an error rolls its writes back and records a failure; wrap it with
// txinbox.Permanent to give up at once. ctx ends at the handler's timeout or when the pool is stopped.
// A handler that returns after its timeout (its ctx's deadline) has passed fails as a timeout, even
// if it returns nil: its writes are rolled back and the attempt is charged (see [HandlerConfig.Timeout]).
type HandlerFunc[T any] func(ctx context.Context, tx pgx.Tx, msg *Message[T]) error

// HandlerConfig overrides pool defaults for one kind. Zero fields take the pool's value.
type HandlerConfig struct {
	// MaxAttempts is how many attempts may start before the message is dead. Default: Config.MaxAttempts.
	MaxAttempts int
	// Timeout bounds one handler call: its ctx ends when Timeout has passed since the call began. A
	// call that returns after that deadline fails with reasonTimeout whatever it returned (nil
	// included): its writes are rolled back, whether they went out before the deadline or after it on
	// another ctx, and the message is retried after the backoff (the attempt counted), or dead once
	// out of attempts. A batch handler's late call is a failed call, bisected as any other: only a
	// message whose call of it alone returned late is charged. Default: Config.Timeout.
	Timeout time.Duration
	// Backoff sets the delay before the next attempt. Default: Config.Backoff.
	Backoff txinbox.Backoff
	// DisallowUnknownFields makes a payload with an object field that T does not have fail to decode
	// (json.Decoder.DisallowUnknownFields), so a misspelled or renamed field makes the message dead at
	// once (reason "decode") instead of leaving the field zero. Default: false (unknown fields are
	// ignored, as encoding/json does).
	DisallowUnknownFields bool
	// BatchSize is, for a kind registered with [HandleBatch], the most messages handed to one call of
	// its handler. The pool claims up to the largest BatchSize of its batch kinds (or
	// [Config.BatchSize], if larger) at once, so that a call can get that many. Default: 500; at most
	// 1000. [Handle] refuses it (a single handler's messages may each take a savepoint:
	// [Config.BatchSize] bounds them). A failing call costs about log2 of it in bisection calls; a
	// bigger batch spreads each transaction's fixed cost (claim, lock, commit) over more messages, and
	// holds more payloads in memory at once. Measured drains of 100,000 messages ran 46k msg/s at 200,
	// 53-55k at 500 and 56-57k at 1000 on one machine, 53-58k at 500 and 65-67k at 1000 on another
	// (docs/design/drain-limits.md, "The batch size").
	BatchSize int
}

// Handlers maps message kinds to handlers. Register with Handle before creating the pool; New freezes
// the registry, and Handle panics afterwards.
type Handlers struct {
	byKind map[string]*handler
	frozen atomic.Bool // set by New: the registry is read by running pools
}

// NewHandlers returns an empty registry.
func NewHandlers() *Handlers { return &Handlers{byKind: map[string]*handler{}} }

type handler struct {
	cfg HandlerConfig
	// run decodes raw and calls the typed handler (single handlers, registered with Handle).
	run func(ctx context.Context, tx pgx.Tx, c *claimed, result *[]byte) error
	// batch is set instead of run for a batch handler (HandleBatch).
	batch *batchFuncs
}

// Handle registers fn for messages of kind, whose payload is decoded into T with encoding/json. A
// payload that does not decode into T is a permanent error: the message is dead at once.
//
// Handle checks its arguments at once and panics on a programming error, as net/http's ServeMux does:
// a nil hs or fn, a kind that no message can have (txinbox.ValidateName), a kind registered twice, more
// than one HandlerConfig, a negative HandlerConfig field, a HandlerConfig.BatchSize (batch handlers
// only), or a registry already given to New.
func Handle[T any](hs *Handlers, kind string, fn HandlerFunc[T], cfg ...HandlerConfig) {
	bad := func(format string, args ...any) {
		panic(fmt.Sprintf("txinbox: worker.Handle(%q): ", kind) + fmt.Sprintf(format, args...))
	}
	switch {
	case hs == nil || hs.byKind == nil:
		bad("nil Handlers (use worker.NewHandlers)")
	case fn == nil:
		bad("nil handler func")
	case hs.frozen.Load():
		bad("the Handlers were already given to worker.New; register every kind before creating the pool")
	case len(cfg) > 1:
		bad("at most one HandlerConfig")
	}
	if err := txinbox.ValidateName(kind); err != nil {
		bad("kind %v", err)
	}
	if _, dup := hs.byKind[kind]; dup {
		bad("kind registered twice")
	}
	h := &handler{}
	if len(cfg) > 0 {
		h.cfg = cfg[0]
		if name, reason := typednil.Field(h.cfg); name != "" {
			bad("HandlerConfig.%s %s", name, reason)
		}
		if h.cfg.MaxAttempts < 0 || h.cfg.Timeout < 0 {
			bad("HandlerConfig.MaxAttempts and Timeout must not be negative")
		}
		if h.cfg.BatchSize != 0 {
			bad("HandlerConfig.BatchSize applies to batch handlers (worker.HandleBatch) only; Config.BatchSize bounds single handlers")
		}
	}
	strict := h.cfg.DisallowUnknownFields
	h.run = func(ctx context.Context, tx pgx.Tx, c *claimed, result *[]byte) error {
		m := &Message[T]{
			ID: c.ID, Consumer: c.Consumer, Key: c.Key, Kind: c.Kind, RawPayload: c.Payload,
			Headers: c.Headers, OrderingKey: c.OrderingKey, Attempt: c.Attempt,
			PreviousError: c.PreviousError, ReceivedAt: c.ReceivedAt, result: result,
		}
		if err := decode(c.Payload, &m.Payload, strict); err != nil {
			return txinbox.Permanent(decodeError{fmt.Errorf("payload does not decode into %T: %w", m.Payload, err)})
		}
		return fn(ctx, tx, m)
	}
	hs.byKind[kind] = h
}

// decode decodes one JSON value from payload into v; strict refuses object fields v does not have.
func decode(payload []byte, v any, strict bool) error {
	if !strict {
		return json.Unmarshal(payload, v)
	}
	d := json.NewDecoder(bytes.NewReader(payload))
	d.DisallowUnknownFields()
	return d.Decode(v) // a stored payload is one jsonb value: nothing can follow it
}

// decodeError is a payload that does not decode into the handler's type (always Permanent).
type decodeError struct{ err error }

func (e decodeError) Error() string { return e.err.Error() }
func (e decodeError) Unwrap() error { return e.err }

// ErrUnknownKind is matched by the failure recorded for a message whose kind has no handler in this
// pool. The message is dead at once (reason unknown_kind): no retry of this pool could handle it.
// The error names the kind and the kinds the pool handles, sorted (at most 10, then how many more),
// so that a mistyped kind shows. Replay the dead letter (admin, "txinbox dead replay") once a pool
// that handles its kind runs: in a rolling deployment, deploy a new kind's handler to every pool of
// the consumer before producers send it.
var ErrUnknownKind = errors.New("txinbox: no handler registered for this kind")

// maxKindsListed bounds the kinds an ErrUnknownKind failure names.
const maxKindsListed = 10

// kindList returns the registered kinds, quoted and sorted, at most maxKindsListed of them followed
// by how many more: what an ErrUnknownKind failure says the pool handles.
func (hs *Handlers) kindList() string {
	kinds := make([]string, 0, len(hs.byKind))
	for k := range hs.byKind {
		kinds = append(kinds, strconv.Quote(k))
	}
	slices.Sort(kinds)
	if n := len(kinds); n > maxKindsListed {
		return strings.Join(kinds[:maxKindsListed], ", ") + " and " + strconv.Itoa(n-maxKindsListed) + " more"
	}
	return strings.Join(kinds, ", ")
}
