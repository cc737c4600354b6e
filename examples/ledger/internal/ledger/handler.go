package ledger

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/worker"
)

// Handler is the type of the OrderPaid handler, and of the decorators that wrap it (the demo's fault
// injection, for one).
type Handler = func(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderPaid]) error

// Handler returns the OrderPaid handler: it credits the event's account through the worker's
// transaction (so the entry, the balance and the message's completion commit together) and stores
// the Applied result with the message. A message whose key is not its event id, or whose event is
// invalid, fails permanently (a dead letter). logger (slog.Default() if nil) is warned of an event
// that already had an entry.
func (l *Ledger) Handler(logger *slog.Logger) Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderPaid]) error {
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
		return m.SetResult(a)
	}
}

// Register registers l.Handler(logger) in hs for KindOrderPaid, with cfg.
func (l *Ledger) Register(hs *worker.Handlers, logger *slog.Logger, cfg ...worker.HandlerConfig) {
	worker.Handle(hs, KindOrderPaid, l.Handler(logger), cfg...)
}
