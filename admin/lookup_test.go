package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/textcheck"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/txinboxtest/plantest"
)

// notStored is an event id no test publishes (event ids are UUIDs of version 7; this one is of
// version 4).
const notStored = "5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5f"

// malformedEventIDs are strings that are not event ids: each is an argument error, not a miss.
var malformedEventIDs = []string{"", "abc", "42", "5f0c6a523c1e4b7a9d2e8a1b2c3d4e5f", "{5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5f}",
	"5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5g", "5f0c6a52-3c1e-4b7a-9d2e_8a1b2c3d4e5f", " 5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5f",
	"5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5f0", "5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5\x00", "5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4é"}

// FindOutboxEvent finds an event by its event id (the UUID a consumer sees), in either case, with every
// field as GetOutboxEvent reads it, its kind and content type among them (their defaults applied: the
// topic, application/json); an event id no stored event has is an *OutboxNotFoundError naming it, and
// a string that is not an event id an argument error (no statement).
func TestFindOutboxEvent(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	ids := outboxtest.Publish(t, db,
		outbox.Message{Topic: "orders", Key: "o-1", Kind: "order.created", ContentType: "application/vnd.acme.order+json",
			Payload: []byte(`{"n": 1}`), Headers: map[string]string{"refuse": "no route"}},
		ev("mail", "", "", ""))
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	for i, want := range []struct{ kind, contentType string }{
		{"order.created", "application/vnd.acme.order+json"},
		{"mail", "application/json"}, // the defaults
	} {
		byID, err := a.GetOutboxEvent(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if byID.Kind != want.kind || byID.ContentType != want.contentType {
			t.Errorf("GetOutboxEvent(%d): kind %q, content type %q; want %q, %q", ids[i], byID.Kind, byID.ContentType, want.kind, want.contentType)
		}
		for _, eventID := range []string{byID.EventID, strings.ToUpper(byID.EventID)} {
			byEventID, err := a.FindOutboxEvent(ctx, eventID)
			if err != nil {
				t.Fatalf("FindOutboxEvent(%q): %v", eventID, err)
			}
			if fmt.Sprintf("%+v", byEventID) != fmt.Sprintf("%+v", byID) {
				t.Errorf("FindOutboxEvent(%q) = %+v\nwant GetOutboxEvent(%d) = %+v", eventID, byEventID, ids[i], byID)
			}
		}
	}
	dead, err := a.ListDead(ctx, admin.DeadFilter{View: admin.Outbox})
	if err != nil || len(dead) != 1 || dead[0].ID != ids[0] || dead[0].Kind != "order.created" || dead[0].ContentType != "application/vnd.acme.order+json" {
		t.Errorf("ListOutboxDead: %+v, %v; want the dead event with its kind and content type", dead, err)
	}

	_, err = a.FindOutboxEvent(ctx, notStored)
	var nf *admin.NotFoundError
	if !errors.Is(err, admin.ErrNotFound) || !errors.As(err, &nf) || nf.EventID != notStored || nf.ID != 0 || !strings.Contains(err.Error(), notStored) {
		t.Fatalf("FindOutboxEvent of an event id not stored: %v, want an *OutboxNotFoundError naming it", err)
	}
	// A discarded event is not found by its event id either.
	gone, err := a.GetOutboxEvent(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if done, err := a.DiscardDead(ctx, admin.Outbox, ids[0]); err != nil || len(done) != 1 {
		t.Fatalf("DiscardOutboxDead: %v, %v", done, err)
	}
	if _, err := a.FindOutboxEvent(ctx, gone.EventID); !errors.As(err, &nf) || nf.EventID != gone.EventID {
		t.Fatalf("FindOutboxEvent of a discarded event: %v, want an *OutboxNotFoundError", err)
	}

	for _, s := range malformedEventIDs {
		_, err := a.FindOutboxEvent(ctx, s)
		var bad *txinbox.ArgumentError
		if !errors.Is(err, txinbox.ErrInvalidArgument) || !errors.As(err, &bad) || bad.Name != "eventID" || errors.Is(err, admin.ErrNotFound) {
			t.Errorf("FindOutboxEvent(%q): %v, want an *ArgumentError named eventID", s, err)
		}
		if textcheck.IsEventID(s) {
			t.Errorf("textcheck.IsEventID(%q) is true", s)
		}
	}
	if !textcheck.IsEventID(strings.ToUpper(notStored)) {
		t.Errorf("textcheck.IsEventID of an upper-case UUID is false")
	}
	if _, err := a.FindOutboxEvent(ctx, strings.ToUpper(notStored)); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("FindOutboxEvent of an upper-case UUID not stored: %v, want ErrNotFound", err)
	}
}

// OutboxIDs maps event ids to the events' ids, in the order given, 0 for an event id not stored; a
// malformed event id, or too many, is an argument error.
func TestOutboxIDs(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	ids := outboxtest.Publish(t, db, ev("t", "", "", ""), ev("t", "", "", ""))
	var eventIDs []string
	for _, id := range ids {
		e, err := a.GetOutboxEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		eventIDs = append(eventIDs, e.EventID)
	}
	got, err := a.OutboxIDs(ctx, eventIDs[1], notStored, strings.ToUpper(eventIDs[0]), eventIDs[1])
	if want := []int64{ids[1], 0, ids[0], ids[1]}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("OutboxIDs: %v, %v; want %v", got, err, want)
	}
	if got, err := a.OutboxIDs(ctx); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("OutboxIDs(): %#v, %v; want an empty slice", got, err)
	}
	var bad *txinbox.ArgumentError
	if _, err := a.OutboxIDs(ctx, eventIDs[0], "abc"); !errors.As(err, &bad) || bad.Name != "eventIDs" {
		t.Fatalf("OutboxIDs with a malformed event id: %v, want an *ArgumentError", err)
	}
	many := make([]string, limits.AdminIDs+1)
	for i := range many {
		many[i] = notStored
	}
	if _, err := a.OutboxIDs(ctx, many...); !errors.As(err, &bad) {
		t.Fatalf("OutboxIDs of %d event ids: %v, want an *ArgumentError", len(many), err)
	}
}

// The lookup by event id probes the index on event_id (migration 00012) once per event id, never
// reading the outbox table: its generic plan (PostgreSQL's plan of a prepared statement from its sixth
// run on) and its custom plan, on an outbox of 5,000 events, probe the index, scan no partition that
// holds a row, and handle a few rows per event id.
func TestOutboxLookupByEventIDUsesTheIndex(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	var ids []int64
	for range 5 {
		msgs := make([]outbox.Message, 1000)
		for i := range msgs {
			msgs[i] = ev("t", "", "", "")
		}
		ids = append(ids, outboxtest.Publish(t, db, msgs...)...)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE "+pgx.Identifier{db.Schema, "outbox"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	var eventIDs []string
	for _, id := range []int64{ids[7], ids[2500], ids[4999]} {
		e, err := a.GetOutboxEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		eventIDs = append(eventIDs, e.EventID)
	}
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	st := schemasql.New(db.Schema)
	for _, lookup := range [][]string{eventIDs[:1], append(eventIDs, notStored)} {
		sql, args := schemasql.Capture(func(q sqlc.DBTX) { _, _ = schemasql.Queries.OutboxIDsOfEventIDs(ctx, q, lookup) })
		sql = st.SQL(sql)
		plans := map[string][]byte{"generic": plantest.ExplainGeneric(t, conn, sql, args)}
		var custom []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&custom); err != nil {
			t.Fatal(err)
		}
		plans["custom"] = custom
		for kind, plan := range plans {
			name := fmt.Sprintf("%s plan of the lookup of %d event ids", kind, len(lookup))
			probes := 0
			for _, n := range plantest.Nodes(t, plan) {
				if strings.Contains(n.Type, "Seq Scan") && n.Rows+n.Removed > 0 { // an empty partition's costs nothing
					t.Errorf("%s: %s on %s read %v rows\n%s", name, n.Type, n.Relation, n.Rows+n.Removed, plan)
				}
				if idx, _ := n.Raw["Index Name"].(string); strings.Contains(idx, "event_id") {
					probes++
				}
			}
			if probes == 0 {
				t.Errorf("%s: no probe of the index on event_id\n%s", name, plan)
			}
			plantest.CheckLinear(t, name, plan, 3*len(lookup)+3)
		}
	}
	got, err := a.OutboxIDs(ctx, eventIDs...)
	if want := []int64{ids[7], ids[2500], ids[4999]}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("OutboxIDs: %v, %v; want %v", got, err, want)
	}
}

// Upstream reads the id and source of the event a stored message was delivered as from its headers
// ce-id and ce-source, as the adapters' sinks store them; "" when absent.
func TestUpstream(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	ctx := context.Background()
	const eventID, source = "0190a8c2-6a1b-7c3d-9e4f-0123456789ab", "/txinbox/orders"
	from, err := c.Receive(ctx, inbox.Message{Consumer: "ledger", Key: eventID, Kind: "order.created", Payload: []byte(`{}`),
		Headers: map[string]string{"ce-id": eventID, "ce-source": source, "traceparent": "00-x"}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Receive(ctx, inbox.Message{Consumer: "ledger", Key: "k", Kind: "order.created", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.GetMessage(ctx, from.ID)
	if err != nil {
		t.Fatal(err)
	}
	if id, src := admin.Upstream(m); id != eventID || src != source {
		t.Errorf("Upstream of a message with ce-id and ce-source: %q, %q; want %q, %q", id, src, eventID, source)
	}
	m, err = c.GetMessage(ctx, plain.ID)
	if err != nil {
		t.Fatal(err)
	}
	if id, src := admin.Upstream(m); id != "" || src != "" {
		t.Errorf("Upstream of a message without them: %q, %q; want empty", id, src)
	}
}
