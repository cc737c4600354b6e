package txinboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// Querier runs a query: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx ([Run.Tx], or the test's own
// transaction), through which an outbox's uncommitted events are seen too.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Match says which events of an outbox [RequirePublished] and [RequireNotPublished] look for. A zero
// field matches any event; Match{} matches every event.
type Match struct {
	// Topic is the event's topic ([outbox.Message.Topic]).
	Topic string
	// Key is the event's ordering key ([outbox.Message.Key]).
	Key string
	// Kind is the event's kind, its default applied: the message's Kind, or its Topic when it had
	// none.
	Kind string
	// State is the event's state: "pending" (not sent yet: waiting for a relay, a retry or its
	// NotBefore, or in a relay's hands), "sent" or "dead".
	State string
}

// String describes the events m looks for, as the failures say it: `events of topic "orders", key
// "o-1"`, or `events` for Match{}.
func (m Match) String() string {
	var parts []string
	for _, f := range []struct{ name, v string }{{"topic", m.Topic}, {"key", m.Key}, {"kind", m.Kind}, {"state", m.State}} {
		if f.v != "" {
			parts = append(parts, fmt.Sprintf("%s %q", f.name, f.v))
		}
	}
	if len(parts) == 0 {
		return "events"
	}
	return "events of " + strings.Join(parts, ", ")
}

// Published is an event of an outbox as [RequirePublished] found it.
type Published struct {
	// ID is the event's id: the one [outbox.Client.Publish] returned, and the relay hands over as
	// [outbox.Event.ID].
	ID string
	// Topic, Key, Payload and Headers are the published message's (Key "" when it had none).
	Topic   string
	Key     string
	Payload []byte
	Headers map[string]string
	// Kind and ContentType are the published message's, defaults applied (the topic;
	// outbox.DefaultContentType).
	Kind        string
	ContentType string
	// State is "pending", "sent" or "dead" (see [Match.State]).
	State string
	// LastError is the error of the event's last failed attempt; "" if none failed.
	LastError string
	// CreatedAt is the start of the transaction that published the event.
	CreatedAt time.Time
}

// RequirePublished fails t unless exactly one event of the outbox in schema, as q sees it, matches m,
// and returns that event. Read through the transaction that published (a handler's [Run.Tx]), it
// sees the events not committed yet. When none or several match, the failure lists the outbox's
// events (the first 20, oldest first).
func RequirePublished(t testing.TB, q Querier, schema string, m Match) *Published {
	t.Helper()
	all := outboxEvents(t, q, schema)
	var found []*Published
	for _, p := range all {
		if m.matches(p) {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("txinboxtest: RequirePublished: %d %s in the outbox of %s, want exactly one; it holds %s",
			len(found), m, schema, list(all))
	}
	return found[0]
}

// RequireNotPublished fails t if an event of the outbox in schema, as q sees it, matches m, listing
// those that do (the first 20, oldest first). RequireNotPublished(t, q, schema, Match{}) requires an
// empty outbox.
func RequireNotPublished(t testing.TB, q Querier, schema string, m Match) {
	t.Helper()
	var found []*Published
	for _, p := range outboxEvents(t, q, schema) {
		if m.matches(p) {
			found = append(found, p)
		}
	}
	if len(found) > 0 {
		t.Fatalf("txinboxtest: RequireNotPublished: %d %s in the outbox of %s, want none: %s", len(found), m, schema, list(found))
	}
}

// matches reports whether p is one of the events m looks for.
func (m Match) matches(p *Published) bool {
	return (m.Topic == "" || m.Topic == p.Topic) && (m.Key == "" || m.Key == p.Key) &&
		(m.Kind == "" || m.Kind == p.Kind) && (m.State == "" || m.State == p.State)
}

// outboxEvents returns every event of the outbox in schema, as q sees it, oldest first.
func outboxEvents(t testing.TB, q Querier, schema string) []*Published {
	t.Helper()
	if schema == "" {
		schema = txinbox.DefaultSchema
	}
	if err := txinbox.ValidateSchema(schema); err != nil {
		t.Fatalf("txinboxtest: %v", err)
	}
	rows, err := q.Query(context.Background(), `SELECT event_id::text, topic, coalesce(key, ''), payload, headers,
			coalesce(kind, topic), coalesce(content_type, $1), state, coalesce(last_error, ''), created_at
		FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()+` ORDER BY id`, outbox.DefaultContentType)
	if err != nil {
		t.Fatalf("txinboxtest: read the outbox of %s: %v", schema, err)
	}
	var out []*Published
	var payload string
	for rows.Next() {
		p := &Published{}
		if err := rows.Scan(&p.ID, &p.Topic, &p.Key, &payload, &p.Headers, &p.Kind, &p.ContentType, &p.State,
			&p.LastError, &p.CreatedAt); err != nil {
			rows.Close()
			t.Fatalf("txinboxtest: read the outbox of %s: %v", schema, err)
		}
		p.Payload = []byte(payload)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("txinboxtest: read the outbox of %s: %v", schema, err)
	}
	return out
}

// list describes events for a failure message: the first 20 of them.
func list(events []*Published) string {
	if len(events) == 0 {
		return "no event"
	}
	var b strings.Builder
	for i, p := range events {
		if i == 20 {
			fmt.Fprintf(&b, "\n\t... and %d more", len(events)-i)
			break
		}
		fmt.Fprintf(&b, "\n\t%s topic %q key %q kind %q %s", p.ID, p.Topic, p.Key, p.Kind, p.State)
		if p.LastError != "" {
			fmt.Fprintf(&b, " (last error %q)", p.LastError)
		}
	}
	return b.String()
}
