package ledger

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// Handler is the type of the OrderPaid handler, a batch handler, and of the decorators that wrap it
// (the demo's fault injection, for one).
type Handler = worker.BatchHandlerFunc[OrderPaid]

// Handler returns the OrderPaid batch handler: each call credits all its valid events with one
// statement ([Ledger.ApplyEvents]: the entries inserted set-based, each account's balance updated once
// in the same statement) through the worker's transaction, so that the entries, the balances and the
// messages' completion commit together, and stores each message's Applied result. A message whose key
// is not its event id, or whose event is invalid, is named in a [worker.BatchErrors] as Permanent (a
// dead letter) without writing anything, and the worker calls the handler again with the others.
// logger (slog.Default() if nil) is warned of an event that already had an entry.
func (l *Ledger) Handler(logger *slog.Logger) Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[OrderPaid]) error {
		invalid := worker.BatchErrors{}
		credits := make([]Credit, 0, len(msgs))
		for _, m := range msgs {
			ev := m.Payload
			if m.Key != ev.EventID {
				invalid[m.ID] = txinbox.Permanent(fmt.Errorf("message key %q is not the event id %q", m.Key, ev.EventID))
			} else if problems := ev.Validate(); len(problems) > 0 {
				invalid[m.ID] = txinbox.Permanent(problems[0])
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
		for i, m := range msgs {
			if applied[i].AlreadyApplied {
				logger.Warn("ledger: event already has an entry; not credited again", "event_id", m.Payload.EventID, "entry_id", applied[i].EntryID)
			}
			if err := m.SetResult(applied[i]); err != nil {
				return err
			}
		}
		return nil
	}
}

// Register registers l.Handler(logger) in hs for KindOrderPaid, as a batch handler, with cfg.
func (l *Ledger) Register(hs *worker.Handlers, logger *slog.Logger, cfg ...worker.HandlerConfig) {
	worker.HandleBatch(hs, KindOrderPaid, l.Handler(logger), cfg...)
}
