package admin_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// fail makes messages retrying as a failed attempt's finish does: the queue row's token and attempts
// counted, its run time an hour ahead, the inbox row's error.
func fail(t *testing.T, db *testdb.DB, lastError string, ids ...int64) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.SQL(`WITH q AS (
			UPDATE {schema}.inbox_queue SET token = token + 1, attempts_started = attempts_started + 1,
				run_at = now() + interval '1 hour' WHERE id = ANY($1))
		UPDATE {schema}.inbox SET attempts_started = attempts_started + 1, attempts_failed = attempts_failed + 1,
			last_error = $2, token = token + 1, next_run_at = now() + interval '1 hour'
		WHERE id = ANY($1)`), ids, lastError)
	if err != nil {
		t.Fatal(err)
	}
}

func inFlightIDs(l []admin.InFlight) []int64 {
	out := make([]int64, len(l))
	for i, x := range l {
		out[i] = x.ID
	}
	return out
}

// pages lists f page by page, limit per page, following the cursors, and returns every id listed.
func pages(t *testing.T, a *admin.Admin, f admin.InFlightFilter, limit int) []int64 {
	t.Helper()
	var all []int64
	f.Limit = limit
	for range 100 {
		l, err := a.ListInFlight(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, inFlightIDs(l)...)
		if len(l) < limit {
			return all
		}
		f.Before = l[len(l)-1].Cursor
	}
	t.Fatal("more than 100 pages")
	return nil
}

// ListInFlight lists the inbox's queued messages newest first, each in its state (pending, retrying,
// processing: the counts of Overview), filtered by consumer and state, page by page with the cursor.
func TestListInFlightInbox(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "retrying", "processing", "pending", "done", "dead")
	fail(t, db, "bank unavailable", ids[0])
	if got := claim(t, db, "ledger", 1); !slices.Equal(got, ids[1:2]) {
		t.Fatalf("claim: %v", got)
	}
	ledgertest.Complete(t, db, time.Hour, ids[3])
	kill(t, db, "gone", time.Now(), ids[4])
	r, err := c.Receive(ctx, inbox.Message{Consumer: "audit", Key: "a", Kind: "Audit", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}

	all, err := c.ListInFlight(ctx, admin.InFlightFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{r.ID, ids[2], ids[1], ids[0]}; !slices.Equal(inFlightIDs(all), want) {
		t.Fatalf("all: %v, want %v (queued only, newest first)", inFlightIDs(all), want)
	}
	byID := map[int64]admin.InFlight{}
	for _, x := range all {
		byID[x.ID] = x
	}
	if x := byID[ids[0]]; x.State != "retrying" || x.Consumer != "ledger" || x.Key != "retrying" || x.LastError != "bank unavailable" ||
		x.AttemptsFailed != 1 || x.NextRunAt.Before(time.Now().Add(50*time.Minute)) || x.Owner != "" || x.Cursor == "" {
		t.Errorf("retrying: %+v", x)
	}
	if x := byID[ids[1]]; x.State != "processing" || x.Owner != "test" || x.StartedAt.IsZero() || !x.NextRunAt.IsZero() {
		t.Errorf("processing: %+v", x)
	}
	if x := byID[ids[2]]; x.State != "pending" || x.LastError != "" || x.EnqueuedAt.IsZero() || x.NextRunAt.IsZero() {
		t.Errorf("pending: %+v", x)
	}
	for _, tc := range []struct {
		f    admin.InFlightFilter
		want []int64
	}{
		{admin.InFlightFilter{Consumer: "ledger"}, []int64{ids[2], ids[1], ids[0]}},
		{admin.InFlightFilter{Consumer: "audit"}, []int64{r.ID}},
		{admin.InFlightFilter{State: "pending"}, []int64{r.ID, ids[2]}},
		{admin.InFlightFilter{State: "retrying"}, []int64{ids[0]}},
		{admin.InFlightFilter{State: "processing"}, []int64{ids[1]}},
		{admin.InFlightFilter{Consumer: "audit", State: "retrying"}, []int64{}},
		{admin.InFlightFilter{Consumer: "nobody"}, []int64{}},
	} {
		if got := pages(t, c.Admin, tc.f, 1); !slices.Equal(got, tc.want) {
			t.Errorf("%+v by pages of 1: %v, want %v", tc.f, got, tc.want)
		}
		if got := pages(t, c.Admin, tc.f, 1000); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.f, got, tc.want)
		}
	}
	// The counts of Overview are those of the lists.
	o, err := c.Overview(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, co := range o.Consumers {
		for state, n := range map[string]int64{"pending": co.Pending, "retrying": co.Retrying, "processing": co.Claimed} {
			if got := pages(t, c.Admin, admin.InFlightFilter{Consumer: co.Consumer, State: state}, 1000); int64(len(got)) != n {
				t.Errorf("%s %s: %d listed, Overview counts %d", co.Consumer, state, len(got), n)
			}
		}
	}
}

// ListInFlight lists the outbox's queued events alike, by topic and state.
func TestListInFlightOutbox(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	ids := outboxtest.Publish(t, db, ev("orders", "o1", "", "broker down"), ev("orders", "o2", "", ""))
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil) // o1 retrying, o2 sent
	held := outboxtest.Publish(t, db, ev("audit", "", "", ""))[0]
	outboxtest.Hold(t, db, 1)
	pending := outboxtest.Publish(t, db, ev("orders", "o3", "", ""))[0]
	later := outboxtest.Publish(t, db, outbox.Message{Topic: "later", Payload: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)})[0]

	all, err := a.ListInFlight(ctx, admin.InFlightFilter{View: admin.Outbox})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{later, pending, held, ids[0]}; !slices.Equal(inFlightIDs(all), want) {
		t.Fatalf("all: %v, want %v", inFlightIDs(all), want)
	}
	byID := map[int64]admin.InFlight{}
	for _, x := range all {
		byID[x.ID] = x
	}
	if x := byID[ids[0]]; x.State != "retrying" || x.Topic != "orders" || x.Key != "o1" || x.Kind != "orders" ||
		x.EventID == "" || x.LastError != "broker down" || x.AttemptsFailed != 1 || x.Consumer != "" {
		t.Errorf("retrying: %+v", x)
	}
	if x := byID[held]; x.State != "processing" || x.Owner == "" || x.StartedAt.IsZero() || x.LeaseUntil.IsZero() || !x.NextRunAt.IsZero() {
		t.Errorf("processing: %+v", x)
	}
	if x := byID[later]; x.State != "pending" || x.NextRunAt.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("pending later: %+v", x)
	}
	for _, tc := range []struct {
		f    admin.InFlightFilter
		want []int64
	}{
		{admin.InFlightFilter{View: admin.Outbox, Topic: "orders"}, []int64{pending, ids[0]}},
		{admin.InFlightFilter{View: admin.Outbox, State: "pending"}, []int64{later, pending}},
		{admin.InFlightFilter{View: admin.Outbox, State: "retrying"}, []int64{ids[0]}},
		{admin.InFlightFilter{View: admin.Outbox, State: "processing"}, []int64{held}},
		{admin.InFlightFilter{View: admin.Outbox, Topic: "orders", State: "processing"}, []int64{}},
	} {
		if got := pages(t, a, tc.f, 1); !slices.Equal(got, tc.want) {
			t.Errorf("%+v by pages of 1: %v, want %v", tc.f, got, tc.want)
		}
	}
	st, err := a.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		for state, n := range map[string]int64{"pending": s.Pending, "retrying": s.Retrying, "processing": s.Claimed} {
			if got := pages(t, a, admin.InFlightFilter{View: admin.Outbox, Topic: s.Topic, State: state}, 1000); int64(len(got)) != n {
				t.Errorf("%s %s: %d listed, OutboxStats counts %d", s.Topic, state, len(got), n)
			}
		}
	}
}

// Bad filters return an *ArgumentError naming the field, without a statement.
func TestListInFlightBadArguments(t *testing.T) {
	t.Parallel()
	a, err := admin.New(txinbox.Store{DB: noDB{t}}, admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]admin.InFlightFilter{
		"View":     {View: 7},
		"Limit":    {Limit: 1001},
		"State":    {State: "dead"},
		"Topic":    {Topic: "orders"},
		"Consumer": {View: admin.Outbox, Consumer: "ledger"},
		"Before":   {Before: "x"},
	} {
		_, err := a.ListInFlight(context.Background(), f)
		var ae *txinbox.ArgumentError
		if !errors.As(err, &ae) || ae.Name != name {
			t.Errorf("%+v: %v, want an ArgumentError of %s", f, err, name)
		}
	}
}
