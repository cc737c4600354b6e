package txinboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest"
	"github.com/txinbox/txinbox/worker"
)

// fatal is what failing.Fatalf panics with: the end of the function under test, as t.Fatalf's
// runtime.Goexit is in a test.
type fatal struct{ msg string }

// failing is a testing.TB whose Fatalf ends the call (see fails) instead of the test.
type failing struct{ testing.TB }

func (failing) Helper()                           {}
func (failing) Fatalf(format string, args ...any) { panic(fatal{fmt.Sprintf(format, args...)}) }

// fails runs f with a failing TB and returns the message f failed with, "" if it did not.
func fails(t *testing.T, f func(tb testing.TB)) (msg string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			ft, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			msg = ft.msg
		}
	}()
	f(failing{t})
	return ""
}

// Drain relays every committed event to the Recorder, which acknowledges it: each is then sent, handed
// over once, in the order of its key; RequirePublished finds each by its topic and key.
func TestDrainRelaysEveryEventToTheRecorder(t *testing.T) {
	db := txinboxtest.New(t)
	msgs := []outbox.Message{
		{Topic: "orders", Key: "o-1", Payload: []byte(`{"n": 1}`)},
		{Topic: "orders", Key: "o-2", Payload: []byte(`{"n": 2}`)},
		{Topic: "orders", Key: "o-1", Kind: "order.paid", Payload: []byte(`{"n": 3}`)},
		{Topic: "mail", Payload: []byte(`{"n": 4}`), Headers: map[string]string{"x-tenant": "t-1"}},
	}
	ids := txinboxtest.Publish(t, db.Store(), msgs...)
	if len(ids) != len(msgs) {
		t.Fatalf("Publish returned %d ids for %d messages", len(ids), len(msgs))
	}
	txinboxtest.RequireNotPublished(t, db.Pool, db.Schema, txinboxtest.Match{State: "sent"})
	rec := &txinboxtest.Recorder{}
	txinboxtest.Drain(t, db.Store(), outbox.RelayConfig{Publisher: rec})

	var got []string
	var o1 []string
	for _, ev := range rec.Events() {
		got = append(got, ev.ID)
		if ev.Key == "o-1" {
			o1 = append(o1, ev.ID)
		}
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(ids)); !slices.Equal(got, want) {
		t.Fatalf("the recorder got %v, want each event once: %v", got, want)
	}
	if !slices.Equal(o1, []string{ids[0], ids[2]}) {
		t.Errorf("key o-1 was handed over in the order %v, want %v", o1, []string{ids[0], ids[2]})
	}
	txinboxtest.RequireNotPublished(t, db.Pool, db.Schema, txinboxtest.Match{State: "pending"})
	p := txinboxtest.RequirePublished(t, db.Pool, db.Schema, txinboxtest.Match{Topic: "mail"})
	if p.ID != ids[3] || p.State != "sent" || p.Kind != "mail" || p.ContentType != outbox.DefaultContentType ||
		string(p.Payload) != `{"n": 4}` || p.Headers["x-tenant"] != "t-1" || p.Key != "" {
		t.Errorf("RequirePublished(mail) = %+v", p)
	}
	if p := txinboxtest.RequirePublished(t, db.Pool, db.Schema, txinboxtest.Match{Kind: "order.paid"}); p.ID != ids[2] {
		t.Errorf("RequirePublished(kind order.paid) = %s, want %s", p.ID, ids[2])
	}
	if p := txinboxtest.RequirePublished(t, db.Pool, db.Schema, txinboxtest.Match{Topic: "orders", Key: "o-2", Kind: "orders"}); p.ID != ids[1] {
		t.Errorf("RequirePublished(orders, o-2, kind defaulted to the topic) = %s, want %s", p.ID, ids[1])
	}
}

// A Recorder's Fate decides each event's outcome, and Drain ends with failed events waiting for their
// retry (an hour away), not retried until dead.
func TestDrainRecorderFate(t *testing.T) {
	db := txinboxtest.New(t)
	ids := txinboxtest.Publish(t, db.Store(),
		outbox.Message{Topic: "ok", Payload: []byte(`{}`)},
		outbox.Message{Topic: "refused", Payload: []byte(`{}`)},
		outbox.Message{Topic: "down", Payload: []byte(`{}`)})
	rec := &txinboxtest.Recorder{Fate: func(ev outbox.Event) error {
		switch ev.Topic {
		case "refused":
			return txinbox.Permanent(errors.New("no route"))
		case "down":
			return errors.New("connection refused")
		}
		return nil
	}}
	txinboxtest.Drain(t, db.Store(), outbox.RelayConfig{Publisher: rec})
	for topic, want := range map[string]struct{ id, state, lastError string }{
		"ok":      {ids[0], "sent", ""},
		"refused": {ids[1], "dead", "no route"},
		"down":    {ids[2], "pending", "connection refused"},
	} {
		p := txinboxtest.RequirePublished(t, db.Pool, db.Schema, txinboxtest.Match{Topic: topic})
		if p.ID != want.id || p.State != want.state || !strings.Contains(p.LastError, want.lastError) || (want.lastError == "") != (p.LastError == "") {
			t.Errorf("%s: %s %s (last error %q), want %s %s (last error containing %q)", topic, p.ID, p.State, p.LastError, want.id, want.state, want.lastError)
		}
	}
	if n := len(rec.Events()); n != 3 {
		t.Errorf("the recorder got %d hand-overs, want 3 (the failed event waits an hour for its retry)", n)
	}
}

// RequirePublished reads through the transaction it is given: a handler's event is found in Run.Tx
// before anything commits, and no other session sees it.
func TestRequirePublishedSeesTheHandlersTransaction(t *testing.T) {
	db := txinboxtest.New(t)
	c, err := outbox.New(db.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	run := txinboxtest.RunHandler(t, db.Pool, func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		_, err := c.Publish(ctx, tx, outbox.Message{Topic: "credited", Key: m.Payload.OrderID, Payload: m.RawPayload})
		return err
	}, worker.Message[credit]{Payload: credit{"o-1", 500}})
	if run.Err != nil {
		t.Fatal(run.Err)
	}
	p := txinboxtest.RequirePublished(t, run.Tx, db.Schema, txinboxtest.Match{Topic: "credited", Key: "o-1"})
	if p.State != "pending" || string(p.Payload) != `{"order_id":"o-1","cents":500}` {
		t.Errorf("the handler's event: %+v", p)
	}
	txinboxtest.RequireNotPublished(t, db.Pool, db.Schema, txinboxtest.Match{})
}

// RequirePublished fails unless exactly one event matches, RequireNotPublished if any does; each
// failure lists the events.
func TestRequirePublishedFailures(t *testing.T) {
	db := txinboxtest.New(t)
	ids := txinboxtest.Publish(t, db.Store(),
		outbox.Message{Topic: "orders", Key: "o-1", Payload: []byte(`{}`)},
		outbox.Message{Topic: "orders", Key: "o-2", Payload: []byte(`{}`)})
	for _, c := range []struct {
		name string
		f    func(tb testing.TB)
		want []string // in the failure message; none: no failure
	}{
		{"one of two", func(tb testing.TB) {
			txinboxtest.RequirePublished(tb, db.Pool, db.Schema, txinboxtest.Match{Key: "o-2"})
		}, nil},
		{"none", func(tb testing.TB) {
			txinboxtest.RequirePublished(tb, db.Pool, db.Schema, txinboxtest.Match{Topic: "mail"})
		}, []string{`0 events of topic "mail"`, "want exactly one", ids[0], ids[1]}},
		{"two", func(tb testing.TB) {
			txinboxtest.RequirePublished(tb, db.Pool, db.Schema, txinboxtest.Match{Topic: "orders"})
		}, []string{`2 events of topic "orders"`, "want exactly one", ids[0], ids[1]}},
		{"other state", func(tb testing.TB) {
			txinboxtest.RequirePublished(tb, db.Pool, db.Schema, txinboxtest.Match{Key: "o-1", State: "sent"})
		}, []string{`0 events of key "o-1", state "sent"`, `key "o-1" kind "orders" pending`}},
		{"not: none", func(tb testing.TB) {
			txinboxtest.RequireNotPublished(tb, db.Pool, db.Schema, txinboxtest.Match{Topic: "mail"})
		}, nil},
		{"not: one", func(tb testing.TB) {
			txinboxtest.RequireNotPublished(tb, db.Pool, db.Schema, txinboxtest.Match{Key: "o-1"})
		}, []string{`1 events of key "o-1"`, "want none", ids[0]}},
		{"not: any", func(tb testing.TB) {
			txinboxtest.RequireNotPublished(tb, db.Pool, db.Schema, txinboxtest.Match{})
		}, []string{"2 events in the outbox", ids[1]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := fails(t, c.f)
			if len(c.want) == 0 {
				if msg != "" {
					t.Fatalf("failed: %s", msg)
				}
				return
			}
			if msg == "" {
				t.Fatal("did not fail")
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the failure does not say %q:\n%s", w, msg)
				}
			}
		})
	}
}
