package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// topics returns "topic:count" for the events stored, and in which slots they are.
func (e *env) topics(t *testing.T) (stored, slots string) {
	t.Helper()
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT
		coalesce((SELECT string_agg(topic || ':' || n, ',' ORDER BY topic) FROM (SELECT topic, count(*) AS n FROM {schema}.outbox GROUP BY topic) c), ''),
		coalesce((SELECT string_agg(DISTINCT slot::text, ',') FROM {schema}.outbox), '')`)).Scan(&stored, &slots); err != nil {
		t.Fatal(err)
	}
	return
}

// Rotations remove the events sent longer ago than the window, with their generation's partition,
// and keep every other event: sent within the window, waiting (not before a later time), claimed,
// and dead (however long ago it died). The events kept go on: the relay still finds and sends the waiting ones afterwards.
func TestRotationRemovesSentEventsPastTheWindowKeepsTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	e.publish(t, msg("old", "a", 1), msg("old", "b", 2), msg("old", "", 3), msg("recent", "c", 4), msg("recent", "", 5),
		msg("dead", "d", 6), outbox.Message{Topic: "waiting", Key: "e", Payload: []byte(`{}`), NotBefore: later},
		outbox.Message{Topic: "waiting", Payload: []byte(`{}`), NotBefore: later}, outbox.Message{Topic: "claimed", Payload: []byte(`{}`), NotBefore: later})
	rec := newRecorder(t, func(ev outbox.Event) error {
		if ev.Topic == "dead" {
			return txinbox.Permanent(errors.New("refused"))
		}
		return nil
	})
	r := e.relay(t, rec, nil)
	run(t, r)
	waitFor(t, "five events sent and one dead", func() bool { return e.count(t, "sent") == 5 && e.count(t, "dead") == 1 })
	stop(t, r)
	// The old ones were sent, and the dead one died, two hours ago; another relay holds a claim on one
	// event.
	for _, q := range []string{
		`UPDATE {schema}.outbox SET finished_at = now() - interval '2 hours' WHERE topic IN ('old', 'dead')`,
		`UPDATE {schema}.outbox_queue q SET claimed = true, owner = 'elsewhere', token = q.token + 1, run_at = now() + interval '1 hour'
		 FROM {schema}.outbox m WHERE m.id = q.id AND m.topic = 'claimed'`,
	} {
		if _, err := e.Pool.Exec(ctx, e.SQL(q)); err != nil {
			t.Fatal(err)
		}
	}
	queue := func() string {
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT coalesce(string_agg(row(q.*)::text, ',' ORDER BY q.id), '') FROM {schema}.outbox_queue q`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	queued := queue()

	opts := outbox.RotateOptions{Window: time.Hour, Force: true}
	const all = "claimed:1,dead:1,old:3,recent:2,waiting:2"
	const kept = "claimed:1,dead:1,recent:2,waiting:2"
	// Generation g lives in slot g % 3; rotating to g+1 retires slot (g+2) % 3 into slot (g+1) % 3.
	for i, want := range []struct {
		gen     int64
		copied  int64
		stored  string
		inSlots string
	}{
		{1, 0, all, "0"},  // retires slot 2, empty
		{2, 6, kept, "2"}, // retires slot 0, where every event was: the old sent ones leave
		{3, 0, kept, "2"}, // retires slot 1, empty
		{4, 6, kept, "1"}, // retires slot 2: the survivors are copied again
		{5, 0, kept, "1"}, // retires slot 0, empty
		{6, 6, kept, "0"}, // retires slot 1
	} {
		rot, err := outbox.Rotate(ctx, e.Store(), opts)
		if err != nil {
			t.Fatal(err)
		}
		stored, slots := e.topics(t)
		if !rot.Rotated || rot.Generation != want.gen || rot.Copied != want.copied || stored != want.stored || slots != want.inSlots {
			t.Fatalf("rotation %d: %+v, stored %s in slots %s; want generation %d, %d copied, stored %s in slots %s",
				i+1, rot, stored, slots, want.gen, want.copied, want.stored, want.inSlots)
		}
	}
	if now := queue(); now != queued {
		t.Errorf("rotations changed the queue:\n  before: %s\n  after:  %s", queued, now)
	}
	// Not due: the generation began just now.
	if rot, err := outbox.Rotate(ctx, e.Store(), outbox.RotateOptions{Window: time.Hour}); err != nil || rot.Rotated {
		t.Errorf("a rotation not due: %+v, %v", rot, err)
	}

	// The waiting events, due now, are found and sent from their new partition.
	if _, err := e.Pool.Exec(ctx, e.SQL(`UPDATE {schema}.outbox_queue SET run_at = now() WHERE NOT claimed`)); err != nil {
		t.Fatal(err)
	}
	run(t, e.relay(t, rec, nil))
	waitFor(t, "the waiting events sent", func() bool { return e.count(t, "sent") == 4 })
	var topics []string
	for _, ev := range rec.ackedEvents() {
		topics = append(topics, ev.Topic)
	}
	if got := strings.Join(topics[len(topics)-2:], ","); got != "waiting,waiting" {
		t.Errorf("last events sent: %s", got)
	}
}

// A rotation waits at most LockTimeout for the retired partition, which a transaction that
// published into it before the previous rotation still holds; then it fails and changes nothing. Once
// that transaction has committed, the next rotation keeps its event.
func TestRotationGivesUpAtItsLockTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := e.client.Publish(ctx, tx, msg("t", "k", 1)); err != nil { // into slot 0, generation 0's
		t.Fatal(err)
	}
	opts := outbox.RotateOptions{Window: time.Hour, Force: true, LockTimeout: 50 * time.Millisecond}
	if rot, err := outbox.Rotate(ctx, e.Store(), opts); err != nil || rot.Generation != 1 { // retires slot 2
		t.Fatalf("first rotation: %+v, %v", rot, err)
	}
	_, err = outbox.Rotate(ctx, e.Store(), opts) // retires slot 0, which tx holds
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("rotation against a held partition: %v, want a lock timeout (55P03)", err)
	}
	if n := e.Count(t, `SELECT gen FROM {schema}.outbox_ring`); n != 1 {
		t.Fatalf("generation %d after the failed rotation, want 1", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if rot, err := outbox.Rotate(ctx, e.Store(), opts); err != nil || !rot.Rotated || rot.Copied != 1 {
		t.Fatalf("rotation after the commit: %+v, %v; want the event copied", rot, err)
	}
	if stored, slots := e.topics(t); stored != "t:1" || slots != "2" {
		t.Fatalf("stored %s in slots %s, want t:1 in slot 2", stored, slots)
	}
}
