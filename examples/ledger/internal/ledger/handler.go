package ledger

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/worker"
)

// Faults injects failures into the OrderPaid handler, for the demo and the tests. The zero value
// injects none.
type Faults struct {
	// FailFirstPercent is the share (0 to 100) of events whose first attempt fails with a transient
	// error after writing its entry (which the worker rolls back). The events are chosen by a hash of
	// their id, so the choice is the same in every process.
	FailFirstPercent float64
	// Poison lists event ids whose every attempt fails: they end as dead letters after MaxAttempts.
	Poison map[string]bool
	// HangAfter, if positive, makes this process hang for good in the handler of the message that
	// follows the first HangAfter messages handled: it writes its entry, calls OnHang, then blocks
	// (holding its batch transaction open) until the process is killed.
	HangAfter int64
	// OnHang is called once, from the hanging handler, with the event id and the number of entries
	// the batch transaction has written and not committed (this one included).
	OnHang func(eventID string, uncommitted int64)

	handled atomic.Int64
}

// ErrInjected is matched by the errors the Faults inject.
var ErrInjected = errors.New("injected failure")

// failsFirst reports whether eventID's first attempt is chosen to fail.
func (f *Faults) failsFirst(eventID string) bool {
	if f.FailFirstPercent <= 0 {
		return false
	}
	h := fnv.New32a()
	h.Write([]byte(eventID))
	return float64(h.Sum32()%10000) < f.FailFirstPercent*100
}

// FailsFirst reports whether the first attempt of eventID fails under f (the demo uses it to predict
// the retries).
func (f *Faults) FailsFirst(eventID string) bool { return f != nil && f.failsFirst(eventID) }

// Register registers the OrderPaid handler in hs, a batch handler: each call credits all its valid
// events with one statement (ApplyEvents: the entries inserted set-based, each account's balance
// updated once in the same statement) through the worker's transaction, so that the entries, the
// balances and the messages' completion commit together, and stores each message's Applied result.
// Invalid events are named in a worker.BatchErrors (Permanent: dead at once) without writing anything,
// and the handler is called again with the others. faults may be nil.
func (l *Ledger) Register(hs *worker.Handlers, faults *Faults, logger *slog.Logger, cfg ...worker.HandlerConfig) {
	if faults == nil {
		faults = &Faults{}
	}
	if logger == nil {
		logger = slog.Default()
	}
	worker.HandleBatch(hs, KindOrderPaid, func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[OrderPaid]) error {
		invalid := worker.BatchErrors{}
		credits := make([]Credit, 0, len(msgs))
		for _, m := range msgs {
			ev := m.Payload
			if m.Key != ev.EventID {
				invalid[m.ID] = worker.Permanent(fmt.Errorf("message key %q is not the event id %q", m.Key, ev.EventID))
			} else if problems := ev.Validate(); len(problems) > 0 {
				invalid[m.ID] = worker.Permanent(problems[0])
			}
			credits = append(credits, Credit{AccountID: ev.AccountID, AmountCents: ev.AmountCents, Source: SourceEvent,
				EventID: ev.EventID, OrderID: ev.OrderID, OccurredAt: ev.OccurredAt})
		}
		if len(invalid) > 0 {
			return invalid // called again with the valid ones
		}
		applied, err := l.ApplyEvents(ctx, tx, credits)
		if err != nil {
			return err
		}
		failed := worker.BatchErrors{}
		for i, m := range msgs {
			ev := m.Payload
			if applied[i].AlreadyApplied {
				logger.Warn("ledger: event already has an entry; not credited again", "event_id", ev.EventID, "entry_id", applied[i].EntryID)
			}
			switch {
			case faults.Poison[ev.EventID]:
				failed[m.ID] = fmt.Errorf("%w: poison event %s: account %s rejects every credit", ErrInjected, ev.EventID, ev.AccountID)
			case m.Attempt == 1 && faults.failsFirst(ev.EventID):
				failed[m.ID] = fmt.Errorf("%w: transient: ledger downstream timed out (first attempt of %s)", ErrInjected, ev.EventID)
			}
		}
		if len(failed) > 0 {
			return failed // the call's entries roll back; called again with the others
		}
		for i, m := range msgs {
			if n := faults.handled.Add(1); faults.HangAfter > 0 && n == faults.HangAfter+1 {
				var uncommitted int64
				// Entries of this transaction share its start time (created_at defaults to now()).
				_ = tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{l.schema, "ledger_entries"}.Sanitize()+
					" WHERE created_at = transaction_timestamp()").Scan(&uncommitted)
				if faults.OnHang != nil {
					faults.OnHang(m.Payload.EventID, uncommitted)
				}
				select {} // hold the batch until the process is killed
			}
			if err := m.SetResult(applied[i]); err != nil {
				return err
			}
		}
		return nil
	}, cfg...)
}
