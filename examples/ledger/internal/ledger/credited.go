package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/outbox"
)

// TopicAccountCredited is the outbox topic of AccountCredited events, and the NATS subject the
// relay publishes them on (`ledger relay`).
const TopicAccountCredited = "ledger.events.account-credited"

// KindAccountCredited is the kind of AccountCredited events: their CloudEvents type, which a txinbox
// consumer (examples/notifier) takes as its inbox message's kind.
const KindAccountCredited = "AccountCredited"

// AccountCredited is the event the ledger publishes for every credit, through its outbox in the
// credit's own transaction: it exists if and only if the credit committed. The outbox gives it an
// event id (a UUID), which the relay sends as the broker's message id and consumers take as their
// idempotency key. Its outbox key is the account, which the relay sends as the envelope's
// partitionkey: the events of one account are published in order, and a txinbox consumer takes the
// account as the events' ordering key, so that it handles them in that order too. AccountSeq numbers
// that order.
type AccountCredited struct {
	EntryID      int64     `json:"entry_id"` // the ledger entry: one event per entry
	AccountID    string    `json:"account_id"`
	AccountSeq   int64     `json:"account_seq"` // the credit's place among the account's credits: 1, 2, ... (Applied.AccountSeq)
	AmountCents  int64     `json:"amount_cents"`
	BalanceCents int64     `json:"balance_cents"` // the account's balance right after this credit
	Source       Source    `json:"source"`
	EventID      string    `json:"event_id,omitempty"` // the OrderPaid event, for SourceEvent
	CreditedAt   time.Time `json:"credited_at"`
}

// publishCredited writes one AccountCredited event per new entry of applied (none for an
// AlreadyApplied credit: nothing was credited) into the outbox, in tx.
func (l *Ledger) publishCredited(ctx context.Context, tx pgx.Tx, source Source, cs []Credit, applied []Applied) error {
	now := time.Now().UTC()
	msgs := make([]outbox.Message, 0, len(applied))
	for i, a := range applied {
		if a.AlreadyApplied {
			continue
		}
		payload, err := json.Marshal(AccountCredited{EntryID: a.EntryID, AccountID: a.AccountID, AccountSeq: a.AccountSeq, AmountCents: a.AmountCents,
			BalanceCents: a.BalanceCents, Source: source, EventID: cs[i].EventID, CreditedAt: now})
		if err != nil {
			return err
		}
		msgs = append(msgs, outbox.Message{Topic: TopicAccountCredited, Kind: KindAccountCredited, Key: a.AccountID, Payload: payload})
	}
	if _, err := l.outbox.Publish(ctx, tx, msgs...); err != nil {
		return fmt.Errorf("ledger: publish AccountCredited: %w", err)
	}
	return nil
}
