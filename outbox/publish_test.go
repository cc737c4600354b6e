package outbox_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// A transaction that publishes and rolls back publishes nothing; one that commits publishes each of
// its events, under the id Publish returned, with what was published.
func TestRolledBackPublishesNothingCommittedPublishesEach(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	msgs := func(prefix string) []outbox.Message {
		return []outbox.Message{
			{Topic: prefix + ".created", Key: "order-1", Payload: []byte(`{"total": 42}`), Headers: map[string]string{"traceparent": "00-x"}},
			{Topic: prefix + ".paid", Key: "order-1", Payload: []byte(`[1, 2.50, "three"]`)},
			{Topic: prefix + ".note", Payload: []byte(`null`)},
		}
	}

	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack, err := e.client.Publish(ctx, tx, msgs("rolled")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	committed := e.publish(t, msgs("committed")...)
	if len(rolledBack) != 3 || len(committed) != 3 {
		t.Fatalf("ids: %v %v", rolledBack, committed)
	}

	rec := newRecorder(t, nil)
	run(t, e.relay(t, rec, nil))
	waitFor(t, "the committed events sent", func() bool { return e.count(t, "sent") == 3 })

	got := map[string]outbox.Event{}
	for _, ev := range rec.ackedEvents() {
		if slices.Contains(rolledBack, ev.ID) {
			t.Errorf("an event of the rolled-back transaction was published: %+v", ev)
		}
		got[ev.ID] = ev
	}
	if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, slices.Sorted(slices.Values(committed))) {
		t.Fatalf("published ids %v, want %v", ids, committed)
	}
	want := msgs("committed")
	for i, id := range committed {
		ev, m := got[id], want[i]
		if ev.Topic != m.Topic || ev.Key != m.Key || string(ev.Payload) != string(m.Payload) ||
			!maps.Equal(ev.Headers, m.Headers) || ev.Attempt != 1 || ev.CreatedAt.IsZero() {
			t.Errorf("event %d published as %+v, want %+v", i, ev, m)
		}
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox`); n != 3 {
		t.Errorf("%d events stored, want 3 (none of the rolled-back transaction)", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue`); n != 0 {
		t.Errorf("%d events still queued", n)
	}
	// The stored id is the one Publish returned, as the relay handed it over.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE event_id::text = ANY($1)`, committed); n != 3 {
		t.Errorf("%d stored events carry the returned ids, want 3", n)
	}
}

// Every event is handed over with its kind and content type (or their defaults: the topic,
// application/json) and the relay's Source, and its CloudEvents attributes say all of it: id,
// type, source, time, datacontenttype, and the key as partitionkey only when it has one.
func TestEventEnvelope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.publish(t,
		outbox.Message{Topic: "orders", Kind: "order.created", ContentType: "application/vnd.order+json; charset=utf-8",
			Key: "order-1", Payload: []byte(`{"n":1}`), Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "a=b"}},
		outbox.Message{Topic: "orders.note", Payload: []byte(`{"n":2}`)},
	)
	rec := newRecorder(t, nil)
	run(t, e.relay(t, rec, func(c *outbox.RelayConfig) { c.Source = "/orders" }))
	waitFor(t, "both events sent", func() bool { return e.count(t, "sent") == 2 })
	got := map[string]outbox.Event{}
	for _, ev := range rec.ackedEvents() {
		got[ev.ID] = ev
	}
	first, second := got[ids[0]], got[ids[1]]
	if first.Kind != "order.created" || first.ContentType != "application/vnd.order+json; charset=utf-8" || first.Source != "/orders" {
		t.Errorf("first event: kind %q, content type %q, source %q", first.Kind, first.ContentType, first.Source)
	}
	if second.Kind != "orders.note" || second.ContentType != outbox.DefaultContentType || second.Source != "/orders" {
		t.Errorf("second event (defaults): kind %q, content type %q, source %q", second.Kind, second.ContentType, second.Source)
	}
	want := map[string]string{"specversion": "1.0", "id": ids[0], "source": "/orders", "type": "order.created",
		"time": first.CreatedAt.UTC().Format(time.RFC3339Nano), "datacontenttype": "application/vnd.order+json; charset=utf-8",
		"partitionkey": "order-1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "a=b"}
	if a := first.CloudEvent(); !maps.Equal(a, want) {
		t.Errorf("first event's CloudEvents attributes:\n got %v\nwant %v", a, want)
	}
	a := second.CloudEvent()
	if _, ok := a["partitionkey"]; ok || a["type"] != "orders.note" || a["datacontenttype"] != "application/json" || a["id"] != ids[1] {
		t.Errorf("second event's CloudEvents attributes: %v", a)
	}
	// The default Source names the schema.
	rec2 := newRecorder(t, nil)
	e2 := newEnv(t)
	e2.publish(t, msg("t", "", 1))
	run(t, e2.relay(t, rec2, nil))
	waitFor(t, "the event sent", func() bool { return e2.count(t, "sent") == 1 })
	if evs := rec2.ackedEvents(); len(evs) != 1 || evs[0].Source != "/txinbox/"+e2.Store().Schema {
		t.Errorf("default source: %+v, want /txinbox/%s", evs, e2.Store().Schema)
	}
}

// An idle relay that only listens (no polling: PollInterval of an hour, no fast polling) is woken by
// the notification the publishing transaction sends at its commit.
func TestNotificationWakesIdleRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder(t, nil)
	r := e.relay(t, rec, func(c *outbox.RelayConfig) {
		c.PollInterval, c.Concurrency = time.Hour, 1
		outbox.SetHotWindow(c, -1)
	})
	run(t, r)
	waitFor(t, "the relay to listen", func() bool { return outbox.ListenerPID(r) != 0 })
	ids := e.publish(t, msg("woken", "k", 1))
	waitFor(t, "the event sent", func() bool { return e.count(t, "sent") == 1 })
	waitFor(t, "the relay to receive the notification", func() bool { return outbox.Notifications(r) > 0 })
	if got := rec.ackedIDs(); !slices.Equal(got, ids) {
		t.Errorf("published %v, want %v", got, ids)
	}
}

// Event ids are UUIDs of version 7, distinct, and valid inbox keys.
func TestEventIDsAreVersion7UUIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var msgs []outbox.Message
	for i := range 200 {
		msgs = append(msgs, msg("t", "", i))
	}
	ids := e.publish(t, msgs...)
	seen := map[string]bool{}
	for _, id := range ids {
		if len(id) != 36 || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) || seen[id] {
			t.Fatalf("id %q: not a fresh UUID of version 7", id)
		}
		seen[id] = true
		if err := txinbox.ValidateKey(id); err != nil {
			t.Fatalf("id %q is not a valid inbox key: %v", id, err)
		}
	}
	// PostgreSQL reads them as the same UUIDs.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE event_id::text = ANY($1)`, ids); n != 200 {
		t.Fatalf("%d of 200 ids stored as given", n)
	}
}

// Invalid configurations are *txinbox.ConfigError, invalid rotation options *txinbox.ArgumentError.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil })
	relayOn := func(mod func(st *txinbox.Store, c *outbox.RelayConfig)) error {
		st, cfg := e.Store(), outbox.RelayConfig{Publisher: pub}
		mod(&st, &cfg)
		_, err := outbox.NewRelay(st, cfg)
		return err
	}
	conn, err := e.Pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, tc := range []struct {
		field string
		err   error
	}{
		{"MaxPayloadBytes", func() error { _, err := outbox.New(e.Store(), outbox.Config{MaxPayloadBytes: -1}); return err }()},
		{"Store.DB", func() error { _, err := outbox.New(txinbox.Store{}, outbox.Config{}); return err }()},
		{"Publisher", relayOn(func(_ *txinbox.Store, c *outbox.RelayConfig) { c.Publisher = nil })},
		{"Store.DB", relayOn(func(st *txinbox.Store, _ *outbox.RelayConfig) { st.DB = conn.Conn() })},
		{"Timeout", relayOn(func(_ *txinbox.Store, c *outbox.RelayConfig) { c.Lease, c.Timeout = time.Second, time.Second })},
		{"BatchSize", relayOn(func(_ *txinbox.Store, c *outbox.RelayConfig) { c.BatchSize = limits.RelayBatchSize + 1 })},
		{"Source", relayOn(func(_ *txinbox.Store, c *outbox.RelayConfig) { c.Source = "orders service" })},
		{"Source", relayOn(func(_ *txinbox.Store, c *outbox.RelayConfig) { c.Source = "%zz" })},
	} {
		var ce *txinbox.ConfigError
		if !errors.As(tc.err, &ce) || ce.Field != tc.field || !errors.Is(tc.err, txinbox.ErrInvalidConfig) {
			t.Errorf("%s: got %v, want a *txinbox.ConfigError of that field", tc.field, tc.err)
		}
	}
	ctx := context.Background()
	for name, opts := range map[string]outbox.RotateOptions{
		"Window":      {Window: -time.Second},
		"Generation":  {Window: time.Hour, Generation: time.Millisecond},
		"LockTimeout": {LockTimeout: time.Microsecond},
	} {
		_, err := outbox.Rotate(ctx, e.Store(), opts)
		var ae *txinbox.ArgumentError
		if !errors.As(err, &ae) || ae.Name != name || !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("Rotate %s: got %v, want a *txinbox.ArgumentError of that name", name, err)
		}
	}
}

// A relay started on a schema without the outbox tables says so.
func TestRelayStartNotMigrated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	schema, _ := testdb.NewSchema(t)
	st := e.Store()
	st.Schema = schema
	r, err := outbox.NewRelay(st, outbox.RelayConfig{Publisher: newRecorder(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); !errors.Is(err, txinbox.ErrNotMigrated) {
		_ = r.Stop(context.Background())
		t.Fatalf("Start on an empty schema: %v, want ErrNotMigrated", err)
	}
}

// The relay's derived settings: its fast polling outlasts Store.NotifyInterval, its claim bound is
// the lesser of 10s and half the Lease, and a negative NotifyInterval turns its LISTEN off.
func TestRelayDerivedSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		notify, lease, hotWindow, claim time.Duration
		listens                         bool
	}{
		{0, 0, time.Second, 10 * time.Second, true},
		{2 * time.Second, 4 * time.Second, 4 * time.Second, 2 * time.Second, true},
		{-1, 0, time.Second, 10 * time.Second, false},
	} {
		st := e.Store()
		st.NotifyInterval = c.notify
		r := relayOn(t, st, outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil }),
			func(rc *outbox.RelayConfig) { rc.Lease, rc.Timeout = c.lease, time.Second })
		if got := outbox.HotWindowOf(r); got != c.hotWindow {
			t.Errorf("NotifyInterval %v: hot window %v, want %v", c.notify, got, c.hotWindow)
		}
		if got := outbox.ClaimTimeoutOf(r); got != c.claim {
			t.Errorf("Lease %v: claim bound %v, want %v", c.lease, got, c.claim)
		}
		if got := outbox.Listens(r); got != c.listens {
			t.Errorf("NotifyInterval %v: listens %v, want %v", c.notify, got, c.listens)
		}
	}
}
