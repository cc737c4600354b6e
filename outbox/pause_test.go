package outbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/outbox"
)

// A paused topic's events are sent by no relay (two relays here), while the other topics' events
// keep going: its events stay queued with their attempts and next-run times as they were, and an
// event of another topic that shares an ordering key with a paused one waits behind it. Resumed, the
// topic's events are sent once each, in key order, none before its not-before time.
func TestPausedTopicIsSentByNoRelayUntilResumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t, nil)
	for range 2 {
		run(t, e.relay(t, rec, nil))
	}
	if ok, err := a.Pause(ctx, admin.Outbox, "broken", "test", "broker of broken down"); err != nil || !ok {
		t.Fatalf("Pause = %v, %v; want true, nil", ok, err)
	}
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, msg("broken", "", i), msg("live", "", i))
	}
	later := msg("broken", "", 99)
	later.NotBefore = time.Now().Add(3 * time.Second)
	msgs = append(msgs, msg("broken", "shared", 100), msg("live", "shared", 101), later)
	ids := e.publish(t, msgs...)
	sharedLive := ids[len(ids)-2]
	broken := func() string {
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT string_agg(format('%s:%s:%s:%s', id, next_run_at, attempts_started, token), ',' ORDER BY id)
			FROM {schema}.outbox WHERE topic = 'broken'`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := broken()
	waitFor(t, "the live topic's events", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE topic = 'live' AND state = 'sent'`) >= 20
	})
	time.Sleep(time.Second) // 50 poll intervals
	for _, ev := range rec.handed() {
		if ev.Topic == "broken" || ev.ID == sharedLive {
			t.Fatalf("event %s of topic %s (key %q) sent while broken was paused", ev.ID, ev.Topic, ev.Key)
		}
	}
	if after := broken(); after != before {
		t.Fatalf("the paused topic's events changed:\nbefore %s\nafter  %s", before, after)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue q JOIN {schema}.outbox m ON m.id = q.id
		WHERE m.topic = 'broken' AND (q.claimed OR q.attempts_started > 0)`); n != 0 {
		t.Fatalf("%d events of the paused topic claimed", n)
	}

	if ok, err := a.Resume(ctx, admin.Outbox, "broken"); err != nil || !ok {
		t.Fatalf("Resume = %v, %v; want true, nil", ok, err)
	}
	resumed := time.Now()
	waitFor(t, "every event sent", func() bool { return e.count(t, "sent") == int64(len(ids)) })
	acked := rec.ackedIDs()
	if len(acked) != len(ids) {
		t.Fatalf("%d events acknowledged, want %d (each once)", len(acked), len(ids))
	}
	if got := firstArrivals(rec.ackedEvents())["shared"]; !slices.Equal(got, ids[len(ids)-3:len(ids)-1]) {
		t.Errorf("key shared went in the order %v, want %v", got, ids[len(ids)-3:len(ids)-1])
	}
	var early int64
	if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT count(*) FROM {schema}.outbox WHERE next_run_at > started_at`)).Scan(&early); err != nil {
		t.Fatal(err)
	}
	if early != 0 {
		t.Errorf("%d events sent before their not-before time", early)
	}
	t.Logf("all sent %v after the resume", time.Since(resumed).Round(time.Millisecond))
}

// gate is a Publisher that hands events to pub, except that once holding, each call waits for
// release (counted in held) before it does.
type gate struct {
	pub outbox.Publisher

	mu      sync.Mutex
	seen    map[string]string // event id: topic, of every call, held ones included
	hold    func(n int) bool  // whether a call holds, given the events seen so far (nil: never)
	held    int
	release chan struct{}
}

func (g *gate) Publish(ctx context.Context, events []outbox.Event) error {
	g.mu.Lock()
	for _, ev := range events {
		g.seen[ev.ID] = ev.Topic
	}
	wait := g.hold != nil && g.hold(len(g.seen))
	if wait {
		g.held++
	}
	g.mu.Unlock()
	if wait {
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.pub.Publish(ctx, events)
}

// handedOf returns the ids of the events of topic handed to the gate so far.
func (g *gate) handedOf(topic string) map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]bool{}
	for id, tp := range g.seen {
		if tp == topic {
			out[id] = true
		}
	}
	return out
}

// A topic paused while a relay drains its backlog stops after the batches in flight at the pause:
// once they end, none of its events is handed to the Publisher however long the relay polls, while
// another topic's events keep going. The pause is kept in the schema, not in the relay: the relay
// stopped and a new one started, woken by new events, still claims nothing of the topic. Resumed,
// the rest of the backlog is sent, each event once.
func TestPauseWhileRelayDrainsABacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const backlog, holdAt = 200, 20
	var msgs []outbox.Message
	for i := range backlog {
		msgs = append(msgs, msg("broken", "", i))
		if i%4 == 0 {
			msgs = append(msgs, msg("live", "", i))
		}
	}
	e.publish(t, msgs...)
	rec := newRecorder(t, nil)
	g := &gate{pub: rec, seen: map[string]string{}, release: make(chan struct{})}
	// From the holdAt-th event on, each call waits: the two runners each stop in a Publish call, so
	// that the pause commits while no claim is under way and the events in flight are known.
	g.hold = func(n int) bool { return n >= holdAt }
	relay := func() *outbox.Relay {
		return e.relay(t, g, func(c *outbox.RelayConfig) { c.Concurrency = 2; c.BatchSize = 5 })
	}
	first := relay()
	run(t, first)
	waitFor(t, "both runners to hold a batch", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.held == 2 })

	allowed := g.handedOf("broken") // handed, or in the two calls held: all that may go from now on
	if ok, err := a.Pause(ctx, admin.Outbox, "broken", "test", "broker of broken down"); err != nil || !ok {
		t.Fatalf("Pause = %v, %v; want true, nil", ok, err)
	}
	g.mu.Lock()
	g.hold = nil
	g.mu.Unlock()
	close(g.release)

	queue := func() string { // the paused topic's unsent events, as they must stay
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT coalesce(string_agg(format('%s:%s:%s:%s', id, next_run_at, attempts_started, token), ',' ORDER BY id), '')
			FROM {schema}.outbox WHERE topic = 'broken' AND state <> 'sent'`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	live := backlog / 4
	lives := func(n int) { // n events of the live topic, sent while broken is paused
		t.Helper()
		for i := range n {
			e.publish(t, msg("live", "", 1000+live+i))
		}
		live += n
		waitFor(t, "the live topic's events", func() bool {
			return e.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE topic = 'live' AND state = 'sent'`) == int64(live)
		})
	}
	paused := func(when string) {
		t.Helper()
		waitFor(t, "the events in flight to be recorded", func() bool {
			return e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue q JOIN {schema}.outbox m ON m.id = q.id
				WHERE m.topic = 'broken' AND q.claimed`) == 0
		})
		before := queue()
		lives(5)
		time.Sleep(time.Second) // 50 poll intervals, hot polling included
		for id := range g.handedOf("broken") {
			if !allowed[id] {
				t.Fatalf("%s: event %s of the paused topic handed to the Publisher after the pause, outside the batches in flight at it", when, id)
			}
		}
		if after := queue(); after != before {
			t.Fatalf("%s: the paused topic's events changed:\nbefore %s\nafter  %s", when, before, after)
		}
	}
	paused("relay draining")

	// A new relay, after the first stopped: the pause holds, even for events published now.
	stop(t, first)
	run(t, relay())
	for i := range 10 {
		e.publish(t, msg("broken", "", 2000+i)) // each notifies the new relay: it claims, and finds nothing of broken
	}
	paused("new relay")

	if ok, err := a.Resume(ctx, admin.Outbox, "broken"); err != nil || !ok {
		t.Fatalf("Resume = %v, %v; want true, nil", ok, err)
	}
	total := int64(backlog + 10 + live)
	waitFor(t, "every event sent", func() bool { return e.count(t, "sent") == total })
	acked := rec.ackedIDs()
	once := map[string]bool{}
	for _, id := range acked {
		if once[id] {
			t.Errorf("event %s acknowledged twice", id)
		}
		once[id] = true
	}
	if int64(len(once)) != total {
		t.Errorf("%d events acknowledged, want %d", len(once), total)
	}
}
