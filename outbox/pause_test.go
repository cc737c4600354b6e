package outbox_test

import (
	"context"
	"slices"
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
