package maintain_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// outboxEvents publishes, and relays, events of four topics into e's outbox: "old" (three, sent
// two hours ago), "recent" (two, sent just now), "dead" (one, dead since two hours ago) and
// "waiting" (two, not to be sent before an hour from now), all in generation 0's partition.
func (e *env) outboxEvents(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c, err := outbox.New(e.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	event := func(topic string, notBefore time.Time) outbox.Message {
		return outbox.Message{Topic: topic, Payload: []byte(`{}`), NotBefore: notBefore}
	}
	if err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		_, err := c.Publish(ctx, tx, event("old", time.Time{}), event("old", time.Time{}), event("old", time.Time{}),
			event("recent", time.Time{}), event("recent", time.Time{}), event("dead", time.Time{}),
			event("waiting", later), event("waiting", later))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pub := outbox.PublisherFunc(func(_ context.Context, events []outbox.Event) error {
		errs := make([]error, len(events))
		for i, ev := range events {
			if ev.Topic == "dead" {
				errs[i] = txinbox.Permanent(errors.New("refused"))
			}
		}
		return outbox.Errors(errs)
	})
	var relayLogs logBuffer // the dead event's warning, unread
	relayStore := e.Store()
	relayStore.Logger = relayLogs.logger()
	r, err := outbox.NewRelay(relayStore, outbox.RelayConfig{Publisher: pub, PollInterval: 20 * time.Millisecond,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "five events sent and one dead", func() bool {
		return e.outboxCount(t, "state = 'sent'") == 5 && e.outboxCount(t, "state = 'dead'") == 1
	})
	sctx, cancel := context.WithTimeout(ctx, time.Minute) // only keeps a hang from lasting
	defer cancel()
	if err := r.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(ctx, e.SQL(`UPDATE {schema}.outbox SET finished_at = now() - interval '2 hours' WHERE topic IN ('old', 'dead')`)); err != nil {
		t.Fatal(err)
	}
}

// outboxCount counts the events of e's outbox that match cond (SQL over the table outbox).
func (e *env) outboxCount(t *testing.T, cond string) int64 {
	return e.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE `+cond)
}

// outboxGeneration is the outbox's current generation.
func (e *env) outboxGeneration(t *testing.T) int64 {
	return e.Count(t, `SELECT gen FROM {schema}.outbox_ring`)
}

// The maintainer rotates the outbox by itself, with no job added (Config.Jobs empty): with a window
// of an hour (the Store's Retention, OutboxWindow's default) and generations of a second, it removes
// the events sent two hours ago, and keeps the ones sent within the hour, the dead one (however long
// ago it died) and the ones not sent yet. Each rotation is logged at Info and each run recorded.
func TestMaintainerRotatesTheOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.outboxEvents(t)
	var logs logBuffer
	store := e.Store()
	store.Retention = time.Hour
	store.Logger = logs.logger()
	maintainerOf(t, store, maintain.Config{Lease: time.Second, Generation: time.Second})

	// Generation 0's partition, where every event is, is retired by the rotation to generation 2.
	waitFor(t, "two rotations of the outbox", func() bool { return e.outboxGeneration(t) >= 2 })
	if n := e.outboxCount(t, "topic = 'old'"); n != 0 {
		t.Errorf("%d events sent two hours ago still stored, want 0", n)
	}
	for cond, want := range map[string]int64{
		"topic = 'recent' AND state = 'sent'":   2,
		"topic = 'dead' AND state = 'dead'":     1,
		"topic = 'waiting' AND state <> 'sent'": 2,
	} {
		if n := e.outboxCount(t, cond); n != want {
			t.Errorf("events where %s: %d, want %d", cond, n, want)
		}
	}
	// Each rotation is logged after it committed: wait for the two records.
	gens := func() []float64 {
		var out []float64
		for _, r := range logs.find(t, "txinbox: rotated the outbox's generations") {
			if r["level"] != "INFO" {
				t.Errorf("a rotation of the outbox logged at %v, want INFO", r["level"])
			}
			gen, _ := r["generation"].(float64)
			out = append(out, gen)
		}
		return out
	}
	waitFor(t, "two rotations of the outbox logged", func() bool { return len(gens()) >= 2 })
	if g := gens(); g[0] != 1 || g[1] != 2 {
		t.Errorf("rotations of the outbox logged with generations %v, want 1, 2, ...", g)
	}
	waitFor(t, "the outbox-rotate job's run recorded as finished", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.inbox_maintenance WHERE job = 'outbox-rotate' AND finished_at IS NOT NULL AND error IS NULL`) == 1
	})
}

// With a negative OutboxWindow the maintainer leaves the outbox alone: it rotates the inbox, and
// never runs the job outbox-rotate.
func TestMaintainerOutboxWindowNegativeLeavesTheOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.outboxEvents(t)
	runs := &leaderLog{}
	store := e.Store()
	store.Retention = time.Hour
	store.Tracer = runs
	maintainerOf(t, store, maintain.Config{Lease: time.Second, Generation: time.Second,
		OutboxWindow: -1})
	ran := func(job string) int {
		runs.mu.Lock()
		defer runs.mu.Unlock()
		n := 0
		for _, r := range runs.runs {
			if r == job {
				n++
			}
		}
		return n
	}
	// Three periods of the retention jobs: the outbox's job, of the same period, would have run in
	// each.
	g0 := e.Count(t, `SELECT gen FROM {schema}.inbox_ring`)
	waitFor(t, "three rotations of the inbox", func() bool { return e.Count(t, `SELECT gen FROM {schema}.inbox_ring`) >= g0+3 })
	waitFor(t, "three runs of expire-keys", func() bool { return ran("expire-keys") >= 3 })
	if n := ran("outbox-rotate"); n != 0 {
		t.Errorf("the job outbox-rotate ran %d times, want never", n)
	}
	if g := e.outboxGeneration(t); g != 0 {
		t.Errorf("the outbox's generation is %d, want 0 (never rotated)", g)
	}
	if n := e.outboxCount(t, "true"); n != 8 {
		t.Errorf("%d events stored, want all 8", n)
	}
}

// The outbox's generation is its OutboxWindow (default: Store.Retention), or Generation if that is
// set and shorter, at least 1s; any OutboxWindow is valid (negative: no rotation of the outbox).
func TestOutboxRotationConfig(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const day = 24 * time.Hour
	for _, c := range []struct{ window, generation, want time.Duration }{
		{0, 0, 7 * day},
		{time.Hour, 0, time.Hour},
		{30 * day, 0, 30 * day},
		{30 * day, 60 * day, 30 * day},
		{time.Hour, time.Minute, time.Minute},
		{time.Nanosecond, 0, time.Second},
		{-1, 0, 0},
	} {
		m, err := maintain.New(db.Store(), maintain.Config{OutboxWindow: c.window, Generation: c.generation})
		if err != nil {
			t.Fatalf("OutboxWindow %v, Generation %v: %v", c.window, c.generation, err)
		}
		if got := maintain.OutboxGenerationOf(m); got != c.want {
			t.Errorf("OutboxWindow %v, Generation %v: the outbox's generation %v, want %v", c.window, c.generation, got, c.want)
		}
	}
	// The built-in job's name is taken.
	_, err := maintain.New(db.Store(), maintain.Config{Jobs: []maintain.Job{{Name: "outbox-rotate", Interval: time.Minute,
		Run: func(context.Context) error { return nil }}}})
	var ce *txinbox.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Jobs" {
		t.Errorf("a job named outbox-rotate: err = %v, want a *txinbox.ConfigError for Jobs", err)
	}
}
