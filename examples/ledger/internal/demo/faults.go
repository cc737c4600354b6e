package demo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/worker"
)

// Faults injects failures into the OrderPaid handler, for the demo and the tests, as a decorator
// (Inject): the ledger's own handler has no test code. The zero value injects none.
type Faults struct {
	// FailFirstPercent is the share (0 to 100) of events whose first attempt fails with a transient
	// error after writing its entry (which the worker rolls back). The events are chosen by a hash of
	// their id, so the choice is the same in every process.
	FailFirstPercent float64
	// Poison lists event ids whose every attempt fails after writing its entry: they end as dead
	// letters after MaxAttempts.
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

// FailsFirst reports whether the first attempt of eventID fails under f.
func (f *Faults) FailsFirst(eventID string) bool {
	if f == nil || f.FailFirstPercent <= 0 {
		return false
	}
	h := fnv.New32a()
	h.Write([]byte(eventID))
	return float64(h.Sum32()%10000) < f.FailFirstPercent*100
}

// Inject returns h with f's failures injected after it: when a call of h succeeded (its entries
// written in the batch transaction), each poison event and each first attempt chosen by
// FailFirstPercent is named in a [worker.BatchErrors] with an error matching ErrInjected, so the worker
// rolls the call's entries back and calls h again without them; and the message after the first
// HangAfter successes hangs. schema is the ledger's schema (for the count of uncommitted entries given
// to OnHang). f may be nil: h is returned as it is.
func (f *Faults) Inject(schema string, h ledger.Handler) ledger.Handler {
	if f == nil {
		return h
	}
	return func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[ledger.OrderPaid]) error {
		if err := h(ctx, tx, msgs); err != nil {
			return err
		}
		failed := worker.BatchErrors{}
		for _, m := range msgs {
			ev := m.Payload
			switch {
			case f.Poison[ev.EventID]:
				failed[m.ID] = fmt.Errorf("%w: poison event %s: account %s rejects every credit", ErrInjected, ev.EventID, ev.AccountID)
			case m.Attempt == 1 && f.FailsFirst(ev.EventID):
				failed[m.ID] = fmt.Errorf("%w: transient: ledger downstream timed out (first attempt of %s)", ErrInjected, ev.EventID)
			}
		}
		if len(failed) > 0 {
			return failed
		}
		for _, m := range msgs {
			if n := f.handled.Add(1); f.HangAfter > 0 && n == f.HangAfter+1 {
				var uncommitted int64
				// Entries of this transaction share its start time (created_at defaults to now()).
				_ = tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "ledger_entries"}.Sanitize()+
					" WHERE created_at = transaction_timestamp()").Scan(&uncommitted)
				if f.OnHang != nil {
					f.OnHang(m.Payload.EventID, uncommitted)
				}
				select {} // hold the batch until the process is killed
			}
		}
		return nil
	}
}
