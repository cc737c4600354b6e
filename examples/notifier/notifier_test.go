package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// An event delivered twice is one inbox message and one notification; an event that is not an
// AccountCredited (no entry, or no place among its account's credits) is a dead letter, without a
// notification. (The run with the ledger, the relay, the
// broker and SIGKILLs is examples/ledger's TestTwoServicesExactlyOnce.)
func TestOneNotificationPerEvent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	for range 2 { // Migrate may run again
		if err := Migrate(ctx, db.Pool, db.Schema); err != nil {
			t.Fatal(err)
		}
	}
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []inbox.Message{
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-1", Payload: []byte(`{"entry_id":1,"account_id":"a","account_seq":1,"amount_cents":250,"balance_cents":250}`)},
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-1", Payload: []byte(`{"entry_id":1,"account_id":"a","account_seq":1,"amount_cents":250,"balance_cents":250}`)},
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-2", Payload: []byte(`{"entry_id":2,"account_id":"a","account_seq":2,"amount_cents":5,"balance_cents":255}`)},
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-3", Payload: []byte(`{"account_id":"a"}`)},
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-4", Payload: []byte(`{"entry_id":4,"account_id":"a","amount_cents":5,"balance_cents":260}`)},
	}
	for _, m := range msgs {
		if _, err := c.Receive(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, KindAccountCredited, Handler(db.Schema, nil))
	p, err := worker.New(db.Store(), worker.Config{Consumer: Consumer, Handlers: hs, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(context.Background()) }()
	deadline := time.Now().Add(time.Minute)
	for db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state IN ('completed', 'dead')`) < 4 {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for the messages to be handled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead' AND key IN ('ev-3', 'ev-4')`); n != 2 {
		t.Errorf("the malformed events are not dead (%d of 2)", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.notifications`); n != 2 {
		t.Errorf("%d notifications, want 2", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.notifications
		WHERE (event_id, entry_id, amount_cents) IN (('ev-1', 1, 250), ('ev-2', 2, 5))`); n != 2 {
		t.Errorf("the notifications are not those of ev-1 and ev-2 (%d match)", n)
	}
}

func TestFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for args, want := range map[string]string{
		"":                            "no database",
		"--database-url x":            "--nats-url is required",
		"--database-url x --nats-url": "flag needs an argument",
		"--database-url x extra":      "unexpected arguments",
	} {
		err := run(context.Background(), strings.Fields(args), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run(%q) = %v; want an error saying %q", args, err, want)
		}
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// A notification records the order in which the notifier handled its account's credits: the
// credit's place (account_seq) and the highest place notified before it (prev_seq). Credits handled
// in order have prev_seq = account_seq - 1; credits stored out of order (2 before 1: the ordering
// key keeps the stored order) are recorded as handled out of order.
func TestNotificationsRecordTheHandledOrder(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	if err := Migrate(ctx, db.Pool, db.Schema); err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	credit := func(account string, seq int) inbox.Message {
		return inbox.Message{Consumer: Consumer, Kind: KindAccountCredited, Key: fmt.Sprintf("%s-%d", account, seq), OrderingKey: account,
			Payload: fmt.Appendf(nil, `{"entry_id":%d,"account_id":%q,"account_seq":%d,"amount_cents":100,"balance_cents":%d}`, seq, account, seq, 100*seq)}
	}
	var msgs []inbox.Message
	for seq := 1; seq <= 6; seq++ {
		msgs = append(msgs, credit("in-order", seq))
	}
	msgs = append(msgs, credit("swapped", 2), credit("swapped", 1), credit("swapped", 3))
	if _, err := c.ReceiveMany(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, KindAccountCredited, Handler(db.Schema, nil))
	p, err := worker.New(db.Store(), worker.Config{Consumer: Consumer, Handlers: hs, Concurrency: 4, BatchSize: 16,
		PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(context.Background()) }()
	deadline := time.Now().Add(time.Minute)
	for db.Count(t, `SELECT count(*) FROM {schema}.notifications`) < int64(len(msgs)) {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for the messages to be handled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := db.Pool.Query(ctx, db.SQL(`SELECT account_id || ' ' || account_seq || ' after ' || prev_seq
		FROM {schema}.notifications ORDER BY account_id, id`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"in-order 1 after 0", "in-order 2 after 1", "in-order 3 after 2", "in-order 4 after 3",
		"in-order 5 after 4", "in-order 6 after 5", "swapped 2 after 0", "swapped 1 after 2", "swapped 3 after 2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handled order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
