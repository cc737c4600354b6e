package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/textcheck"
)

// Paused is a paused consumer (View Inbox) or outbox topic (View Outbox), as Pause recorded it.
type Paused struct {
	View   View      `json:"-"`
	Name   string    `json:"name"` // the consumer or the topic
	By     string    `json:"paused_by"`
	At     time.Time `json:"paused_at"` // the database server's clock
	Reason string    `json:"reason,omitempty"`
}

// maxPauseText is the longest by or reason Pause accepts, in bytes.
const maxPauseText = 1000

// Pause pauses the consumer name (v Inbox) or the outbox topic name (v Outbox), recording who paused
// it (by, required) and why (reason, optional), each at most 1,000 bytes of valid UTF-8 without control characters. A consumer is
// checked as txinbox.ValidateName checks it, a topic as outbox.Message.Topic is (1 to 255 bytes).
// Invalid arguments return an *[txinbox.ArgumentError].
// It returns true if it paused it, false if it was paused already (its record is left as it was).
//
// The pause is stored in the Store's schema (migration 00014): every worker pool of the consumer, or
// every relay of the schema, in every process, claims nothing of it from its next claim on (within
// its PollInterval). What is queued stays queued as it is: no attempt is charged, no retry time is
// moved, nothing is lost or reordered (later outbox events of an ordering key wait behind a paused
// event of that key, whatever their topic). Batches already claimed finish. New messages and events
// are still received and published. The name need not have any message or event stored yet.
func (a *Admin) Pause(ctx context.Context, v View, name, by, reason string) (bool, error) {
	if err := v.check("view"); err != nil {
		return false, err
	}
	if err := checkPauseArgs(v, name, by, reason); err != nil {
		return false, err
	}
	db := a.st.Wrap(a.store.DB)
	var paused bool
	var err error
	if v == Outbox {
		paused, err = schemasql.Queries.PauseTopic(ctx, db, sqlc.PauseTopicParams{Topic: name, PausedBy: by, Reason: reason})
	} else {
		paused, err = schemasql.Queries.PauseConsumer(ctx, db, sqlc.PauseConsumerParams{Consumer: name, PausedBy: by, Reason: reason})
	}
	if err != nil {
		return false, schemasql.Err(err)
	}
	return paused, nil
}

// Resume resumes the consumer name (v Inbox) or the outbox topic name (v Outbox) that Pause paused,
// and wakes its pools or the relays with a notification (unless Store.NotifyInterval is negative):
// they claim its work at once, each queued message or event at its own time (its not-before or retry
// time, or now if that has passed). It returns false if name was not paused.
func (a *Admin) Resume(ctx context.Context, v View, name string) (bool, error) {
	if err := v.check("view"); err != nil {
		return false, err
	}
	if err := checkPauseName(v, name); err != nil {
		return false, err
	}
	notify := a.store.NotifyInterval >= 0
	if v == Inbox {
		channel := ""
		if notify {
			channel = a.store.NotifyChannel()
		}
		resumed, err := schemasql.Queries.ResumeConsumer(ctx, a.st.Wrap(a.store.DB), name, channel)
		if err != nil {
			return false, schemasql.Err(err)
		}
		return resumed, nil
	}
	channel := ""
	if notify {
		channel = schemasql.OutboxChannel(a.store.Schema)
	}
	var resumed bool
	err := pgx.BeginFunc(ctx, a.store.DB, func(tx pgx.Tx) error {
		db := a.st.Wrap(tx)
		// The relays' claim lock first: the claims that parked the topic's events have committed.
		if err := schemasql.Queries.OutboxClaimLock(ctx, db, schemasql.OutboxClaimLockKey(a.store.Schema)); err != nil {
			return err
		}
		var err error
		resumed, err = schemasql.Queries.ResumeTopic(ctx, db, name, channel)
		return err
	})
	if err != nil {
		return false, schemasql.Err(err)
	}
	return resumed, nil
}

// ListPaused returns what is paused: the paused consumers (View Inbox), then the paused outbox topics
// (View Outbox), each in name order (never nil).
func (a *Admin) ListPaused(ctx context.Context) ([]Paused, error) {
	db := a.st.Wrap(a.store.DB)
	cs, err := schemasql.Queries.ListPausedConsumers(ctx, db)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	ts, err := schemasql.Queries.ListPausedTopics(ctx, db)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	out := make([]Paused, 0, len(cs)+len(ts))
	for _, c := range cs {
		out = append(out, Paused{View: Inbox, Name: c.Consumer, By: c.PausedBy, At: c.PausedAt.Time, Reason: c.Reason})
	}
	for _, t := range ts {
		out = append(out, Paused{View: Outbox, Name: t.Topic, By: t.PausedBy, At: t.PausedAt.Time, Reason: t.Reason})
	}
	return out, nil
}

func checkPauseName(v View, name string) error {
	if v == Outbox {
		if err := textcheck.Check(name, limits.TopicBytes, false); err != nil {
			return &txinbox.ArgumentError{Name: "topic", Reason: err.Error()}
		}
		return nil
	}
	if err := txinbox.ValidateName(name); err != nil {
		return &txinbox.ArgumentError{Name: "consumer", Reason: err.Error()}
	}
	return nil
}

func checkPauseArgs(v View, name, by, reason string) error {
	if err := checkPauseName(v, name); err != nil {
		return err
	}
	if err := textcheck.Check(by, maxPauseText, false); err != nil {
		return &txinbox.ArgumentError{Name: "by", Reason: err.Error()}
	}
	if err := textcheck.Check(reason, maxPauseText, true); err != nil {
		return &txinbox.ArgumentError{Name: "reason", Reason: err.Error()}
	}
	return nil
}
