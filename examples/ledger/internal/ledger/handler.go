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

// Register registers the OrderPaid handler in hs: it credits the event's account through the
// worker's transaction (so the entry, the balance and the message's completion commit together) and
// stores the Applied result with the message. faults may be nil.
func (l *Ledger) Register(hs *worker.Handlers, faults *Faults, logger *slog.Logger, cfg ...worker.HandlerConfig) {
	if faults == nil {
		faults = &Faults{}
	}
	if logger == nil {
		logger = slog.Default()
	}
	worker.Handle(hs, KindOrderPaid, func(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderPaid]) error {
		ev := m.Payload
		if m.Key != ev.EventID {
			return worker.Permanent(fmt.Errorf("message key %q is not the event id %q", m.Key, ev.EventID))
		}
		if problems := ev.Validate(); len(problems) > 0 {
			return worker.Permanent(problems[0])
		}
		a, err := l.Apply(ctx, tx, Credit{AccountID: ev.AccountID, AmountCents: ev.AmountCents, Source: SourceEvent,
			EventID: ev.EventID, OrderID: ev.OrderID, OccurredAt: ev.OccurredAt})
		if err != nil {
			return err
		}
		if a.AlreadyApplied {
			logger.Warn("ledger: event already has an entry; not credited again", "event_id", ev.EventID, "entry_id", a.EntryID)
		}
		switch {
		case faults.Poison[ev.EventID]:
			return fmt.Errorf("%w: poison event %s: account %s rejects every credit", ErrInjected, ev.EventID, ev.AccountID)
		case m.Attempt == 1 && faults.failsFirst(ev.EventID):
			return fmt.Errorf("%w: transient: ledger downstream timed out (first attempt of %s)", ErrInjected, ev.EventID)
		}
		if n := faults.handled.Add(1); faults.HangAfter > 0 && n == faults.HangAfter+1 {
			var uncommitted int64
			// Entries of this transaction share its start time (created_at defaults to now()).
			_ = tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{l.schema, "ledger_entries"}.Sanitize()+
				" WHERE created_at = transaction_timestamp()").Scan(&uncommitted)
			if faults.OnHang != nil {
				faults.OnHang(ev.EventID, uncommitted)
			}
			select {} // hold the batch until the process is killed
		}
		return m.SetResult(a)
	}, cfg...)
}
