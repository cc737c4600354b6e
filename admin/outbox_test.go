package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// ev is an event of topic and key whose fate (outboxtest.ByHeaders) is refuse or fail with the text
// given (both empty: acknowledged).
func ev(topic, key, refuse, fail string) outbox.Message {
	h := map[string]string{}
	if refuse != "" {
		h["refuse"] = refuse
	}
	if fail != "" {
		h["fail"] = fail
	}
	return outbox.Message{Topic: topic, Key: key, Payload: []byte(`{"n": 1}`), Headers: h}
}

func newOutboxAdmin(t *testing.T) (*admin.Admin, *testdb.DB) {
	t.Helper()
	db := testdb.New(t)
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return a, db
}

func eventIDs(evs []txinbox.DeadLetter) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// OutboxStats counts each topic's events in every state, from real relays: sent, dead (refused),
// retrying (failed once), claimed (a relay holds it), pending (never claimed), and the lag: the age of
// the oldest unsent event, not counting one whose NotBefore is ahead.
func TestOutboxStatsCountsEachState(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	ids := outboxtest.Publish(t, db, ev("orders", "o1", "", ""), ev("orders", "o2", "", ""),
		ev("orders", "o3", "no such exchange", ""), ev("orders", "o4", "", "broker down"), ev("mail", "", "refused", ""))
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	// The retrying event was published an hour ago: the lag of orders.
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.outbox SET created_at = now() - interval '1 hour' WHERE id = $1`), ids[3]); err != nil {
		t.Fatal(err)
	}
	outboxtest.Publish(t, db, ev("audit", "", "", ""))
	outboxtest.Hold(t, db, 1) // its one runner is busy from here on: nothing else is claimed
	outboxtest.Publish(t, db, ev("orders", "o5", "", ""))
	outboxtest.Publish(t, db, outbox.Message{Topic: "later", Payload: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)})

	start := time.Now()
	st, err := a.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]admin.OutboxTopicStats{}
	var topics []string
	for _, s := range st {
		got[s.Topic] = s
		topics = append(topics, s.Topic)
	}
	if want := []string{"audit", "later", "mail", "orders"}; !slices.Equal(topics, want) {
		t.Fatalf("topics %v, want %v (in order)", topics, want)
	}
	type counts struct{ pending, retrying, claimed, sent, dead int64 }
	for topic, want := range map[string]counts{
		"audit": {claimed: 1}, "later": {pending: 1}, "mail": {dead: 1}, "orders": {pending: 1, retrying: 1, sent: 2, dead: 1},
	} {
		s := got[topic]
		if c := (counts{s.Pending, s.Retrying, s.Claimed, s.Sent, s.Dead}); c != want {
			t.Errorf("%s: %+v, want %+v", topic, c, want)
		}
	}
	if s := got["orders"]; s.Unsent() != 2 {
		t.Errorf("orders: %d unsent, want 2", s.Unsent())
	}
	if lag := got["orders"].OldestUnsentAge; lag < time.Hour || lag > time.Hour+time.Since(start)+time.Minute {
		t.Errorf("orders: lag %v, want about an hour (its retrying event's age)", lag)
	}
	if lag := got["audit"].OldestUnsentAge; lag <= 0 || lag > time.Minute {
		t.Errorf("audit: lag %v, want the claimed event's age (seconds)", lag)
	}
	if lag := got["later"].OldestUnsentAge; lag != 0 {
		t.Errorf("later: lag %v, want 0 (its event's NotBefore is ahead)", lag)
	}
	if lag := got["mail"].OldestUnsentAge; lag != 0 {
		t.Errorf("mail: lag %v, want 0 (nothing unsent)", lag)
	}
	// The JSON form gives the lag in seconds, and reads back.
	b, err := json.Marshal(got["orders"])
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if sec, _ := raw["oldest_unsent_seconds"].(float64); sec < 3600 || raw["retrying"] != 1.0 {
		t.Errorf("JSON %s", b)
	}
	var back admin.OutboxTopicStats
	if err := json.Unmarshal(b, &back); err != nil || back.OldestUnsentAge.Round(time.Millisecond) != got["orders"].OldestUnsentAge.Round(time.Millisecond) || back.Sent != 2 {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

// deadOutboxSet brings to death by real relays events a and b of topic orders ("Insufficient funds",
// key k1 and k2), which died on day, c of orders (a timeout, key k3), which died a day later, and d
// of topic audit ("insufficient FUNDS", key k1), two days later; e of orders is sent, f retrying.
// They are published in the order c, d, a and b: the order they died in is not their ids'.
func deadOutboxSet(t *testing.T) (a *admin.Admin, db *testdb.DB, ids map[string]int64, day time.Time) {
	t.Helper()
	a, db = newOutboxAdmin(t)
	ids = map[string]int64{}
	round := func(names string, msgs ...outbox.Message) {
		t.Helper()
		got := outboxtest.Publish(t, db, msgs...)
		for i, n := range names {
			ids[string(n)] = got[i]
		}
		outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	}
	round("c", ev("orders", "k3", "timeout: deadline exceeded", ""))
	round("d", ev("audit", "k1", "insufficient FUNDS", ""))
	round("ab", ev("orders", "k1", "Insufficient funds", ""), ev("orders", "k2", "Insufficient funds", ""))
	round("ef", ev("orders", "k4", "", ""), ev("orders", "k5", "", "broker down"))
	day = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	for n, at := range map[string]time.Time{"a": day, "b": day, "c": day.Add(24 * time.Hour), "d": day.Add(48 * time.Hour)} {
		if _, err := db.Pool.Exec(context.Background(), db.SQL(`UPDATE {schema}.outbox SET finished_at = $2 WHERE id = $1`), ids[n], at); err != nil {
			t.Fatal(err)
		}
	}
	return a, db, ids, day
}

// ListOutboxDead lists the dead events newest first (by time of death, then id), pages with the
// cursor, and applies the inbox's filter rules: topic and key exact, the error text a substring in any
// case, a window of time.
func TestListOutboxDeadFilters(t *testing.T) {
	t.Parallel()
	a, _, ids, day := deadOutboxSet(t)
	ctx := context.Background()
	all, err := a.ListDead(ctx, admin.DeadFilter{View: admin.Outbox})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{ids["d"], ids["c"], ids["b"], ids["a"]}; !slices.Equal(eventIDs(all), want) {
		t.Fatalf("all: %v, want %v (newest first; a and b died together: the greater id first)", eventIDs(all), want)
	}
	cursor := map[string]string{}
	for _, e := range all {
		for n, id := range ids {
			if id == e.ID {
				cursor[n] = e.Cursor
			}
		}
	}
	cases := []struct {
		name string
		f    admin.DeadFilter
		want []int64
	}{
		{"topic", admin.DeadFilter{View: admin.Outbox, Topic: "orders"}, []int64{ids["c"], ids["b"], ids["a"]}},
		{"key", admin.DeadFilter{View: admin.Outbox, Key: "k1"}, []int64{ids["d"], ids["a"]}},
		{"error", admin.DeadFilter{View: admin.Outbox, ErrorContains: "funds"}, []int64{ids["d"], ids["b"], ids["a"]}},
		{"error in another case", admin.DeadFilter{View: admin.Outbox, ErrorContains: "FUNDS"}, []int64{ids["d"], ids["b"], ids["a"]}},
		{"error, mixed case", admin.DeadFilter{View: admin.Outbox, ErrorContains: "iNsUfFiCiEnT f"}, []int64{ids["d"], ids["b"], ids["a"]}},
		{"error is literal", admin.DeadFilter{View: admin.Outbox, ErrorContains: "%"}, []int64{}},
		{"error is literal _", admin.DeadFilter{View: admin.Outbox, ErrorContains: "timeout_"}, []int64{}},
		{"since", admin.DeadFilter{View: admin.Outbox, Since: day.Add(time.Hour)}, []int64{ids["d"], ids["c"]}},
		{"until", admin.DeadFilter{View: admin.Outbox, Until: day.Add(time.Hour)}, []int64{ids["b"], ids["a"]}},
		{"window", admin.DeadFilter{View: admin.Outbox, Since: day.Add(time.Hour), Until: day.Add(25 * time.Hour)}, []int64{ids["c"]}},
		{"page 1", admin.DeadFilter{View: admin.Outbox, Limit: 2}, []int64{ids["d"], ids["c"]}},
		{"page 2", admin.DeadFilter{View: admin.Outbox, Limit: 2, Before: cursor["c"]}, []int64{ids["b"], ids["a"]}},
		{"page 3", admin.DeadFilter{View: admin.Outbox, Limit: 2, Before: cursor["a"]}, []int64{}},
		{"within a tie", admin.DeadFilter{View: admin.Outbox, Before: cursor["b"]}, []int64{ids["a"]}},
		{"combined", admin.DeadFilter{View: admin.Outbox, Topic: "orders", ErrorContains: "FUNDS", Before: cursor["b"]}, []int64{ids["a"]}},
	}
	for _, tc := range cases {
		got, err := a.ListDead(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(eventIDs(got), tc.want) {
			t.Errorf("%s: ids %v, want %v", tc.name, eventIDs(got), tc.want)
		}
		n, err := a.CountDead(ctx, admin.DeadFilter{View: admin.Outbox, Topic: tc.f.Topic, Key: tc.f.Key, ErrorContains: tc.f.ErrorContains,
			Since: tc.f.Since, Until: tc.f.Until, Before: tc.f.Before})
		if tc.f.Limit == 0 && (err != nil || n.Matching != int64(len(tc.want))) {
			t.Errorf("%s: CountOutboxDead %+v, %v; want %d", tc.name, n, err, len(tc.want))
		}
	}
	e := all[0]
	if e.ID != ids["d"] || e.Topic != "audit" || e.Key != "k1" || e.LastError != "permanent: insufficient FUNDS" || len(e.EventID) != 36 ||
		!e.DiedAt.Equal(day.Add(48*time.Hour)) || e.AttemptsStarted != 1 || e.AttemptsFailed != 1 {
		t.Errorf("listed dead event: %+v", e)
	}

	for _, f := range []admin.DeadFilter{{Limit: -1}, {Limit: limits.DeadListLimit + 1}, {Before: "x"}, {Before: "12"},
		{Before: "1:-2"}, {Since: day, Until: day}, {ErrorContains: "a\x00"}, {Topic: "\xff"}, {Key: "\xff"},
		{Consumer: "ledger"}, {Kind: "Audit"}} { // the last two: the inbox's fields
		f.View = admin.Outbox
		var ae *txinbox.ArgumentError
		if _, err := a.ListDead(ctx, f); !errors.Is(err, txinbox.ErrInvalidArgument) || !errors.As(err, &ae) {
			t.Errorf("%+v: err = %v, want an *ArgumentError", f, err)
		}
		if _, err := a.CountDead(ctx, f); f.Limit == 0 && !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("CountOutboxDead %+v: err = %v, want an *ArgumentError", f, err)
		}
	}
}

// CountOutboxDead's Before bounds OutboxDeadIDs to the events counted: one that dies after the count
// is not among them, nor is one replayed and dead again. OutboxDeadIDs lists ids in increasing order,
// at most limit; OutboxDeadAmong says which ids are dead now.
func TestCountOutboxDeadBoundsIDs(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	ids := outboxtest.Publish(t, db, ev("t", "", "timeout", ""), ev("t", "", "Timeout", ""), ev("t", "", "refused", ""), ev("t", "", "", ""))
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	f := admin.DeadFilter{View: admin.Outbox, ErrorContains: "TIMEOUT"}
	n, err := a.CountDead(ctx, f)
	if err != nil || n.Matching != 2 {
		t.Fatalf("CountOutboxDead: %+v, %v; want 2 matching", n, err)
	}
	later := outboxtest.Publish(t, db, ev("t", "", "timeout", ""))
	// The first dies again after the count (replayed, and refused again).
	if got, err := a.ReplayDead(ctx, admin.Outbox, ids[0]); err != nil || !slices.Equal(got, ids[:1]) {
		t.Fatalf("ReplayOutboxDead: %v, %v", got, err)
	}
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	f.Before = n.Before
	if got, err := a.DeadIDs(ctx, f, 100); err != nil || !slices.Equal(got, ids[1:2]) {
		t.Fatalf("OutboxDeadIDs bounded by the count: %v, %v; want %v", got, err, ids[1:2])
	}
	if l, err := a.ListDead(ctx, admin.DeadFilter{View: admin.Outbox, Limit: 2}); err != nil || len(l) != 2 || !slices.Contains([]int64{ids[0], later[0]}, l[0].ID) ||
		!slices.Contains([]int64{ids[0], later[0]}, l[1].ID) {
		t.Fatalf("newest: %+v, %v; want the two that died after the count", l, err)
	}
	if got, err := a.DeadIDs(ctx, admin.DeadFilter{View: admin.Outbox, ErrorContains: "timeout"}, 2); err != nil || !slices.Equal(got, ids[:2]) {
		t.Fatalf("OutboxDeadIDs, limit 2: %v, %v", got, err)
	}
	if _, err := a.DeadIDs(ctx, f, 0); !errors.Is(err, txinbox.ErrInvalidArgument) {
		t.Fatalf("OutboxDeadIDs limit 0: %v, want an *ArgumentError", err)
	}
	if got, err := a.DeadAmong(ctx, admin.Outbox, ids[3], later[0], 999999, ids[2]); err != nil || !slices.Equal(got, []int64{ids[2], later[0]}) {
		t.Fatalf("OutboxDeadAmong: %v, %v", got, err)
	}
	if got, err := a.DeadAmong(ctx, admin.Outbox); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("OutboxDeadAmong(): %v, %v; want an empty slice", got, err)
	}
	// With nothing dead, the count's bound matches nothing, even an event that dies after it.
	b, db2 := newOutboxAdmin(t)
	n, err = b.CountDead(ctx, admin.DeadFilter{View: admin.Outbox})
	if err != nil || n.Matching != 0 || n.Before == "" {
		t.Fatalf("CountOutboxDead of nothing: %+v, %v", n, err)
	}
	outboxtest.Publish(t, db2, ev("t", "", "refused", ""))
	outboxtest.Drain(t, db2, outboxtest.ByHeaders, nil)
	if got, err := b.DeadIDs(ctx, admin.DeadFilter{View: admin.Outbox, Before: n.Before}, 10); err != nil || len(got) != 0 {
		t.Fatalf("OutboxDeadIDs bounded by a count of nothing: %v, %v", got, err)
	}
}

// A replayed event goes again with attempts reset, under the same event id, keeping its last error
// until it is sent; ids that are not dead are skipped, and the relay publishes the event again.
func TestReplayOutboxDead(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	ids := outboxtest.Publish(t, db, ev("t", "k", "refused", ""), ev("t", "k", "", ""), ev("t", "", "", "down"))
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	dead, err := a.GetOutboxEvent(ctx, ids[0])
	if err != nil || dead.State != "dead" {
		t.Fatalf("before: %+v, %v", dead, err)
	}
	got, err := a.ReplayDead(ctx, admin.Outbox, ids[2], ids[0], ids[1], 999999)
	if err != nil || !slices.Equal(got, ids[:1]) {
		t.Fatalf("ReplayOutboxDead: %v, %v; want only the dead one", got, err)
	}
	r, err := a.GetOutboxEvent(ctx, ids[0])
	if err != nil || r.State != "pending" || r.AttemptsStarted != 0 || r.AttemptsFailed != 0 || r.EventID != dead.EventID ||
		r.LastError != "permanent: refused" || !r.FinishedAt.IsZero() || r.NextRunAt.IsZero() || r.Token != dead.Token {
		t.Fatalf("replayed: %+v, %v (dead: %+v)", r, err, dead)
	}
	if again, err := a.ReplayDead(ctx, admin.Outbox, ids[0]); err != nil || len(again) != 0 {
		t.Fatalf("replayed twice: %v, %v", again, err)
	}
	var handed []outbox.Event
	var mu sync.Mutex
	outboxtest.Drain(t, db, func(e outbox.Event) error { mu.Lock(); handed = append(handed, e); mu.Unlock(); return nil }, nil)
	if len(handed) != 1 || handed[0].ID != dead.EventID || handed[0].Attempt != 1 {
		t.Fatalf("handed over after the replay: %+v; want the replayed event, attempt 1", handed)
	}
	if s, err := a.GetOutboxEvent(ctx, ids[0]); err != nil || s.State != "sent" || s.AttemptsStarted != 1 || s.Token <= dead.Token {
		t.Fatalf("after the replay: %+v, %v", s, err)
	}
	for _, bad := range [][]int64{{0}, {-1}, make([]int64, limits.AdminIDs+1)} {
		if _, err := a.ReplayDead(ctx, admin.Outbox, bad...); !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("ReplayOutboxDead(%d ids): %v, want an *ArgumentError", len(bad), err)
		}
	}
	if got, err := a.ReplayDead(ctx, admin.Outbox); err != nil || got != nil {
		t.Errorf("ReplayOutboxDead(): %v, %v", got, err)
	}
}

// holding is a Publisher whose first call waits until release is closed (ignoring its ctx: a call that
// outlives its lease), then acknowledges; it closes held when that call starts.
type holding struct {
	held, release chan struct{}
	once, freed   sync.Once
}

func newHolding() *holding { return &holding{held: make(chan struct{}), release: make(chan struct{})} }

// free releases the held call (once: a test defers it too, so that its relays stop at once if it
// fails first).
func (p *holding) free() { p.freed.Do(func() { close(p.release) }) }

func (p *holding) Publish(context.Context, []outbox.Event) error {
	p.once.Do(func() { close(p.held); <-p.release })
	return nil
}

func runRelay(t *testing.T, db *testdb.DB, pub outbox.Publisher, mod func(*outbox.RelayConfig)) *outbox.Relay {
	t.Helper()
	cfg := outbox.RelayConfig{Publisher: pub, Concurrency: 1, PollInterval: 10 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	st := db.Store()
	st.NotifyInterval = -1 // no LISTEN
	st.Logger = slog.New(slog.DiscardHandler)
	r, err := outbox.NewRelay(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopRelay(t, r) })
	return r
}

func stopRelay(t *testing.T, r *outbox.Relay) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = r.Stop(ctx)
}

func await(t *testing.T, what string, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// The replay is fenced: relay A's Publish call outlives its lease, relay B takes the event over and
// it dies; once replayed, relay C claims it. When A's call returns (acknowledged), A records nothing:
// C's claim is untouched (its token is above every earlier claim's), and C sends the event.
func TestReplayOutboxDeadIsFenced(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	id := outboxtest.Publish(t, db, ev("t", "k", "", ""))[0]
	pa := newHolding()
	defer pa.free()
	ra := runRelay(t, db, pa, func(c *outbox.RelayConfig) {
		c.Owner, c.Lease, c.Timeout, c.PollInterval = "relay-A", 500*time.Millisecond, 200*time.Millisecond, time.Hour
	})
	await(t, "relay A's Publish call", pa.held)
	rb := runRelay(t, db, outbox.PublisherFunc(func(context.Context, []outbox.Event) error {
		return txinbox.Permanent(errors.New("refused"))
	}), func(c *outbox.RelayConfig) { c.Owner = "relay-B" })
	outboxtest.WaitFor(t, "relay B to take the event over and refuse it", func() bool {
		e, err := a.GetOutboxEvent(ctx, id)
		return err == nil && e.State == "dead"
	})
	stopRelay(t, rb)
	dead, _ := a.GetOutboxEvent(ctx, id)
	if got, err := a.ReplayDead(ctx, admin.Outbox, id); err != nil || !slices.Equal(got, []int64{id}) {
		t.Fatalf("ReplayOutboxDead: %v, %v", got, err)
	}
	pc := newHolding()
	defer pc.free()
	runRelay(t, db, pc, func(c *outbox.RelayConfig) { c.Owner = "relay-C" })
	await(t, "relay C's Publish call", pc.held)
	held, err := a.GetOutboxEvent(ctx, id)
	if err != nil || held.State != "claimed" || held.Owner != "relay-C" {
		t.Fatalf("C's claim: %+v, %v; want claimed by relay-C", held, err)
	}

	pa.free()        // A's call returns, acknowledged, long after its lease
	stopRelay(t, ra) // A has recorded what it would
	now, err := a.GetOutboxEvent(ctx, id)
	if err != nil || now.State != "claimed" || now.Owner != "relay-C" || now.Token != held.Token || now.AttemptsFailed != 0 {
		t.Fatalf("after relay A's stale call: %+v, %v; want C's claim untouched: %+v", now, err, held)
	}
	if held.Token <= dead.Token {
		t.Errorf("C's claim has token %d, the dead event's last claim %d: a replayed event's claims must have greater tokens", held.Token, dead.Token)
	}
	pc.free()
	outboxtest.WaitFor(t, "relay C to send the event", func() bool {
		e, err := a.GetOutboxEvent(ctx, id)
		return err == nil && e.State == "sent" && e.Token == held.Token
	})
}

// DiscardOutboxDead deletes the dead events given and nothing else; a discarded event is not found.
func TestDiscardOutboxDead(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	ids := outboxtest.Publish(t, db, ev("t", "", "refused", ""), ev("t", "", "refused", ""), ev("t", "", "", ""), ev("t", "", "", "down"))
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	got, err := a.DiscardDead(ctx, admin.Outbox, ids[3], ids[2], ids[1], 999999)
	if err != nil || !slices.Equal(got, ids[1:2]) {
		t.Fatalf("DiscardOutboxDead: %v, %v; want only the dead one given", got, err)
	}
	if _, err := a.GetOutboxEvent(ctx, ids[1]); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("discarded event: %v, want ErrNotFound", err)
	}
	var nf *admin.NotFoundError
	if _, err := a.GetOutboxEvent(ctx, 999999); !errors.As(err, &nf) || nf.ID != 999999 {
		t.Fatalf("unknown id: %v, want an *OutboxNotFoundError", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.outbox`); n != 3 {
		t.Fatalf("%d events left, want 3", n)
	}
	if again, err := a.DiscardDead(ctx, admin.Outbox, ids[1]); err != nil || len(again) != 0 {
		t.Fatalf("discarded twice: %v, %v", again, err)
	}
	if _, err := a.DiscardDead(ctx, admin.Outbox, 0); !errors.Is(err, txinbox.ErrInvalidArgument) {
		t.Fatalf("DiscardOutboxDead(0): %v", err)
	}
}

// GetOutboxEvent reads every field of an event in each state, its claim from the queue while a relay
// holds it.
func TestGetOutboxEvent(t *testing.T) {
	t.Parallel()
	a, db := newOutboxAdmin(t)
	ctx := context.Background()
	payload := `{"total": 42,  "items":[1, 2]}` // kept byte for byte
	ids := outboxtest.Publish(t, db,
		outbox.Message{Topic: "orders", Key: "o-1", Payload: []byte(payload), Headers: map[string]string{"traceparent": "00-x", "refuse": "no route"}},
		ev("orders", "", "", ""))
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	d, err := a.GetOutboxEvent(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != ids[0] || d.Topic != "orders" || d.Key != "o-1" || string(d.Payload) != payload || d.Headers["traceparent"] != "00-x" ||
		d.State != "dead" || d.AttemptsStarted != 1 || d.AttemptsFailed != 1 || d.LastError != "permanent: no route" ||
		d.CreatedAt.IsZero() || d.StartedAt.IsZero() || d.FinishedAt.IsZero() || !d.NextRunAt.IsZero() || d.Owner != "" || d.Token != 1 {
		t.Errorf("dead: %+v", d)
	}
	if s, err := a.GetOutboxEvent(ctx, ids[1]); err != nil || s.State != "sent" || s.Key != "" || s.FinishedAt.IsZero() || s.Headers != nil {
		t.Errorf("sent: %+v, %v", s, err)
	}
	p := outboxtest.Publish(t, db, outbox.Message{Topic: "later", Payload: []byte(`1`), NotBefore: time.Now().Add(time.Hour)})[0]
	if s, err := a.GetOutboxEvent(ctx, p); err != nil || s.State != "pending" || s.NextRunAt.Before(time.Now().Add(50*time.Minute)) || s.Token != 0 {
		t.Errorf("pending: %+v, %v", s, err)
	}
	c := outboxtest.Publish(t, db, ev("now", "", "", ""))[0]
	outboxtest.Hold(t, db, 1)
	if s, err := a.GetOutboxEvent(ctx, c); err != nil || s.State != "claimed" || s.Owner == "" || s.LeaseUntil.Before(time.Now()) ||
		s.AttemptsStarted != 1 || s.Token != 1 || s.StartedAt.IsZero() {
		t.Errorf("claimed: %+v, %v", s, err)
	}
}
