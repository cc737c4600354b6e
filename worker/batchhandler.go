package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/typednil"
)

// defaultHandlerBatchSize is HandlerConfig.BatchSize of a batch handler when it is 0 (documented
// there).
const defaultHandlerBatchSize = 500

// BatchHandlerFunc handles a set of messages of one kind in one call: msgs are in claim order (by
// message id), at most one per ordering key, and at most the kind's HandlerConfig.BatchSize. The
// intended use is one statement for the whole set (a multi-row INSERT ... SELECT FROM unnest(...),
// COPY, a multi-row upsert), so that n messages cost one round trip instead of n.
//
// Everything it writes through tx runs in one savepoint of the call's own and commits together with
// the "completed" mark of every message of the call, or not at all. tx is the same as a
// [HandlerFunc]'s: every method of pgx.Tx works, including Conn and a nested Begin, and Commit and
// Rollback return [ErrTxManaged]. [Message.SetResult] stores a result per message.
//
// When it returns an error, the call's writes are rolled back and the pool isolates the failing
// messages by bisection: it calls the handler again on halves of the set, each call in a savepoint
// of its own, down to single messages. Only the messages that fail alone are charged a failure
// (retried after Backoff, dead after MaxAttempts; a [txinbox.Permanent] error returned for a single message
// makes it dead at once); the others complete. With k failing messages among n, that costs at most
// k·(⌈log2 n⌉+2)+1 calls. A handler that knows which messages failed returns a [BatchErrors]
// instead: those are charged and the rest is called again without bisecting.
//
// So a handler may be called several times within one attempt, on subsets of the messages, and a
// call's writes may be rolled back after it returned: effects outside the transaction (an e-mail, an
// HTTP call) must be keyed by [Message.Key], as with single handlers.
//
// A panic is recovered and treated as an error of the call (bisected). Timeout bounds each call; a
// call that returns after its deadline, even with nil, has timed out: its writes are rolled back and
// it is bisected like any failure, so that only a message whose call of it alone returned late is
// charged (a timeout), and the messages that complete in calls returning in time are never charged.
// Messages that hang cost up to 2n-1 calls of at most Timeout each in one batch (a single
// handler's batch of n such messages costs n). A
// message whose payload does not decode into T is dead at once and never reaches the handler. If a
// call leaves the transaction unusable (its connection lost, or the transaction ended through
// tx.Conn()), the messages of that call are run again alone: after their lease, by the rescuer, one at
// a time, as after a crash. Exception: if the handler committed the batch transaction itself (COMMIT
// through tx.Conn()), the messages of the call are dead at once, as with a single handler, since their
// effects may have been committed.
//
// Example, crediting accounts with one statement per call (ledger_entries has a unique event_id):
//
//	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[Credit]) error {
//		keys, accounts, amounts := make([]string, len(msgs)), make([]string, len(msgs)), make([]int64, len(msgs))
//		for i, m := range msgs {
//			keys[i], accounts[i], amounts[i] = m.Key, m.Payload.Account, m.Payload.Amount
//		}
//		_, err := tx.Exec(ctx, `INSERT INTO ledger_entries (event_id, account, amount)
//			SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])`, keys, accounts, amounts)
//		return err
//	})
type BatchHandlerFunc[T any] func(ctx context.Context, tx pgx.Tx, msgs []*Message[T]) error

// BatchErrors is an error a [BatchHandlerFunc] may return to say which of its messages failed, by
// [Message.ID], each with its own error (wrap it with [txinbox.Permanent] to make that message dead at once).
// The call's writes are rolled back; the messages named are charged their error, and the handler is
// called again, in a new savepoint, with the other messages of the call, without bisecting. IDs that
// are not in the call are ignored; a BatchErrors naming none of the call's messages is an ordinary
// error (the pool bisects).
type BatchErrors map[int64]error

// Error lists the failed message ids and their errors, by id.
func (e BatchErrors) Error() string {
	ids := make([]int64, 0, len(e))
	for id := range e {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var b strings.Builder
	b.WriteString("txinbox: failed messages:")
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(" " + strconv.FormatInt(id, 10) + ": ")
		if e[id] == nil {
			b.WriteString("<nil>")
		} else {
			b.WriteString(e[id].Error())
		}
	}
	return b.String()
}

// batchFuncs is the typed side of a batch handler.
type batchFuncs struct {
	// decode builds the *Message[T] of c, whose SetResult stores into *result.
	decode func(c *claimed, result *[]byte) (any, error)
	// call calls the handler with the messages decode built.
	call func(ctx context.Context, tx pgx.Tx, msgs []any) error
}

// HandleBatch registers fn as the batch handler of kind: the pool hands it the messages of kind it
// claimed, many at a time (see [BatchHandlerFunc]), with payloads decoded into T as [Handle] does. A
// pool may mix batch and single handlers (kinds registered with [Handle]); one batch transaction runs
// both.
//
// HandleBatch panics on a programming error as Handle does, and on a HandlerConfig.BatchSize below 0
// or above 1000 (0 means 500).
func HandleBatch[T any](hs *Handlers, kind string, fn BatchHandlerFunc[T], cfg ...HandlerConfig) {
	bad := func(format string, args ...any) {
		panic(fmt.Sprintf("txinbox: worker.HandleBatch(%q): ", kind) + fmt.Sprintf(format, args...))
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
		if h.cfg.BatchSize < 0 || h.cfg.BatchSize > limits.HandlerBatchSize {
			bad("HandlerConfig.BatchSize must be 0 (default %d) to %d", defaultHandlerBatchSize, limits.HandlerBatchSize)
		}
	}
	if h.cfg.BatchSize == 0 {
		h.cfg.BatchSize = defaultHandlerBatchSize
	}
	strict := h.cfg.DisallowUnknownFields
	h.batch = &batchFuncs{
		decode: func(c *claimed, result *[]byte) (any, error) {
			m := &Message[T]{
				ID: c.ID, Consumer: c.Consumer, Key: c.Key, Kind: c.Kind, RawPayload: c.Payload,
				Headers: c.Headers, OrderingKey: c.OrderingKey, Attempt: c.Attempt,
				PreviousError: c.PreviousError, ReceivedAt: c.ReceivedAt, result: result,
			}
			if err := decode(c.Payload, &m.Payload, strict); err != nil {
				return nil, txinbox.Permanent(decodeError{fmt.Errorf("payload does not decode into %T: %w", m.Payload, err)})
			}
			return m, nil
		},
		call: func(ctx context.Context, tx pgx.Tx, msgs []any) error {
			typed := make([]*Message[T], len(msgs))
			for i, m := range msgs {
				typed[i] = m.(*Message[T])
			}
			return fn(ctx, tx, typed)
		},
	}
	hs.byKind[kind] = h
}

// errLeftAborted is the failure of a call that returned nil but left the transaction aborted.
var errLeftAborted = errors.New("the handler returned nil, but its transaction was left aborted by a failed statement")

// errCallBrokeTx is the failure of a call that returned nil, although the context it gave a statement
// ended while the message's savepoint was being established, which cost the batch its transaction.
var errCallBrokeTx = errors.New("the handler returned nil, but the context of its statement ended while the statement was being sent, which cost the batch its transaction")
