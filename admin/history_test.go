package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/worker"
)

// checkHistory fails unless h is the attempts numbered first to last (consecutive), each of reason
// and owner, with an error containing errText (%d: its number) and a start.
func checkHistory(t *testing.T, what string, h []txinbox.Attempt, first, last int, reason, owner, errText string) {
	t.Helper()
	if len(h) != last-first+1 {
		t.Fatalf("%s: %d attempts in its history, want %d (%d to %d): %+v", what, len(h), last-first+1, first, last, h)
	}
	for i, a := range h {
		want := errText
		if strings.Contains(want, "%d") {
			want = fmt.Sprintf(errText, first+i)
		}
		if a.Number != first+i || a.Reason != reason || a.Owner != owner || !strings.Contains(a.Error, want) ||
			a.StartedAt.IsZero() || a.Duration < 0 {
			t.Fatalf("%s: attempt %d of its history: %+v; want number %d, reason %q, owner %q, error containing %q",
				what, i, a, first+i, reason, owner, want)
		}
	}
}

// Every kind of failure of a handler appends to the message's history (error, panic, timeout,
// permanent), with its number, reason, error, duration and the pool's owner, and the history keeps the
// last 10 attempts: a message out of its 12 attempts lists attempts 3 to 12. A completed attempt adds
// nothing (the success path writes nothing more).
func TestInboxHistoryOfEachFailureKind(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	keys := []string{"error", "panic", "timeout", "permanent", "flaky", "ok"}
	ids := map[string]int64{}
	for _, k := range keys {
		r, err := c.Receive(ctx, inbox.Message{Consumer: "hist", Key: k, Kind: "job", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids[k] = r.ID
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "job", func(ctx context.Context, _ pgx.Tx, m *worker.Message[struct{}]) error {
		switch m.Key {
		case "error":
			return fmt.Errorf("boom %d", m.Attempt)
		case "panic":
			panic("kaboom")
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		case "permanent":
			return txinbox.Permanent(errors.New("no such account"))
		case "flaky":
			if m.Attempt == 1 {
				return errors.New("flaky once")
			}
		}
		return nil
	})
	st := db.Store()
	st.Logger = slog.New(slog.DiscardHandler)
	p, err := worker.New(st, worker.Config{Consumer: "hist", Handlers: hs, Owner: "hist-pool", MaxAttempts: 12,
		Timeout: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return time.Millisecond })})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(ctx) }()
	outboxtest.WaitFor(t, "every message to complete or die", func() bool {
		l, err := c.ListInFlight(ctx, admin.InFlightFilter{Consumer: "hist"})
		return err == nil && len(l) == 0
	})
	get := func(k string) inbox.StoredMessage {
		m, err := c.GetMessage(ctx, ids[k])
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	checkHistory(t, "error", get("error").History, 3, 12, "error", "hist-pool", "boom %d")
	checkHistory(t, "panic", get("panic").History, 3, 12, "panic", "hist-pool", "kaboom")
	checkHistory(t, "timeout", get("timeout").History, 3, 12, "timeout", "hist-pool", "")
	for _, a := range get("timeout").History {
		if a.Duration < 50*time.Millisecond {
			t.Fatalf("timeout: an attempt of %v, less than its Timeout", a.Duration)
		}
	}
	checkHistory(t, "permanent", get("permanent").History, 1, 1, "permanent", "hist-pool", "no such account")
	flaky := get("flaky")
	checkHistory(t, "flaky", flaky.History, 1, 1, "error", "hist-pool", "flaky once")
	if flaky.State != inbox.StateCompleted || get("ok").State != inbox.StateCompleted {
		t.Fatalf("flaky %s, ok %s: want completed", flaky.State, get("ok").State)
	}
	if h := get("ok").History; h != nil {
		t.Fatalf("a message completed at once has a history: %+v", h)
	}
}

// A batch that never finished (its worker died) is charged by the rescuer (ChargeBatch), and each of
// its messages gets the attempt in its history: reason crashed, the batch's owner. The messages a batch
// handler call held when it broke its transaction (SettleBatch) get theirs too.
func TestInboxHistoryOfCrashesAndHeldMessages(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	var ids []int64
	for _, k := range []string{"a", "b", "held"} {
		r, err := c.Receive(ctx, inbox.Message{Consumer: "hist", Key: k, Kind: "job", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	st := schemasql.New(db.Schema)
	record, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(db.Pool), sqlc.RecordBatchParams{Consumer: "hist", Xid: "3", Ids: ids[:2], Owner: "killed"})
	if err != nil {
		t.Fatal(err)
	}
	if charged, err := schemasql.Queries.ChargeBatch(ctx, st.Wrap(db.Pool), "hist", record); err != nil || len(charged) != 2 {
		t.Fatalf("charge: %v, %v", charged, err)
	}
	for _, id := range ids[:2] {
		m, err := c.GetMessage(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		checkHistory(t, m.Key, m.History, 1, 1, "crashed", "killed", "never finished")
	}
	record, err = schemasql.Queries.RecordBatch(ctx, st.Wrap(db.Pool), sqlc.RecordBatchParams{Consumer: "hist", Xid: "4", Ids: ids[2:], Owner: "settler"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := schemasql.Queries.SettleBatch(ctx, st.Wrap(db.Pool), sqlc.SettleBatchParams{Consumer: "hist", Batch: record,
		HeldIds: ids[2:], HeldTokens: []int64{0}, StartedAt: pgtype.Timestamptz{Time: time.Now(), Valid: true},
		Owner: "settler", HeldError: "the call broke the transaction"}); err != nil || n != 1 {
		t.Fatalf("settle: %d, %v", n, err)
	}
	m, err := c.GetMessage(ctx, ids[2])
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "held", m.History, 1, 1, "error", "settler", "broke the transaction")
	// The rotations that retire the messages' generation copy them, history included.
	for range 3 {
		if _, err := db.Pool.Exec(ctx, db.SQL(`SELECT * FROM {schema}.inbox_rotate(NULL)`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE slot <> 0`); n != 3 {
		t.Fatalf("%d messages copied out of slot 0 by the rotations, want 3", n)
	}
	for i, id := range ids {
		m, err := c.GetMessage(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.History) != 1 {
			t.Fatalf("message %d after the rotations: history %+v", i, m.History)
		}
	}
}

// Every kind of failure of a Publisher appends to the event's history (error, panic, timeout,
// permanent), with the relay's owner, bounded to the last 10 attempts; a sent event's attempt adds
// nothing.
func TestOutboxHistoryOfEachFailureKind(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	keys := []string{"error", "panic", "timeout", "permanent", "ok"}
	msgs := make([]outbox.Message, len(keys))
	for i, k := range keys {
		msgs[i] = outbox.Message{Topic: "hist", Key: k, Payload: []byte(`{}`)}
	}
	ids := outboxtest.Publish(t, db, msgs...)
	pub := outbox.PublisherFunc(func(ctx context.Context, evs []outbox.Event) error {
		switch evs[0].Key {
		case "error":
			return fmt.Errorf("broker down %d", evs[0].Attempt)
		case "panic":
			panic("kaboom")
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		case "permanent":
			return txinbox.Permanent(errors.New("no such exchange"))
		}
		return nil
	})
	runRelay(t, db, pub, func(c *outbox.RelayConfig) {
		c.Owner, c.BatchSize, c.MaxAttempts, c.Timeout = "hist-relay", 1, 12, 50*time.Millisecond
		c.Backoff = txinbox.BackoffFunc(func(int) time.Duration { return time.Millisecond })
	})
	outboxtest.WaitFor(t, "every event to be sent or die", func() bool {
		l, err := a.ListInFlight(ctx, admin.InFlightFilter{View: admin.Outbox})
		return err == nil && len(l) == 0
	})
	get := func(i int) admin.OutboxEvent {
		e, err := a.GetOutboxEvent(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	checkHistory(t, "error", get(0).History, 3, 12, "error", "hist-relay", "broker down %d")
	checkHistory(t, "panic", get(1).History, 3, 12, "panic", "hist-relay", "kaboom")
	checkHistory(t, "timeout", get(2).History, 3, 12, "timeout", "hist-relay", "")
	checkHistory(t, "permanent", get(3).History, 1, 1, "permanent", "hist-relay", "no such exchange")
	if e := get(4); e.State != "sent" || e.History != nil {
		t.Fatalf("ok: %s, history %+v; want sent, none", e.State, e.History)
	}
	// The rotations that retire the events' generation copy the dead ones, history included.
	for range 3 {
		if _, err := db.Pool.Exec(ctx, db.SQL(`SELECT * FROM {schema}.outbox_rotate(NULL, interval '1 hour')`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE slot <> 0`); n != 5 {
		t.Fatalf("%d events copied out of slot 0 by the rotations, want 5", n)
	}
	checkHistory(t, "error, rotated", get(0).History, 3, 12, "error", "hist-relay", "broker down %d")
}

// A claim whose lease ended is taken over, and the attempt it cut short enters the event's history:
// reason taken_over, the first relay's owner.
func TestOutboxHistoryOfATakeover(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	id := outboxtest.Publish(t, db, ev("t", "k", "", ""))[0]
	pa := newHolding()
	defer pa.free()
	runRelay(t, db, pa, func(c *outbox.RelayConfig) {
		c.Owner, c.Lease, c.Timeout, c.PollInterval = "relay-A", 500*time.Millisecond, 200*time.Millisecond, time.Hour
	})
	await(t, "relay A's Publish call", pa.held)
	runRelay(t, db, outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil }),
		func(c *outbox.RelayConfig) { c.Owner = "relay-B" })
	outboxtest.WaitFor(t, "relay B to take the event over and send it", func() bool {
		e, err := a.GetOutboxEvent(ctx, id)
		return err == nil && e.State == "sent"
	})
	e, err := a.GetOutboxEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "taken over", e.History, 1, 1, "taken_over", "relay-A", "lease ended")
}
