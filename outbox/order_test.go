package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/outbox"
)

// Events of six keys (and some without a key) are published in many transactions, one after the
// other, while relays run, fail events (each event fails 0 to 2 times before it is acknowledged), and
// are stopped and replaced, two of them at once for a while. Every event is published, and for each
// key the first arrival of its events follows their commit order.
func TestPerKeyOrderAcrossRestartsAndRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const txs, perTx = 40, 3
	var (
		failMu sync.Mutex
		tries  = map[string]int{}
	)
	fail := func(ev outbox.Event) error {
		failMu.Lock()
		defer failMu.Unlock()
		tries[ev.ID]++
		h := fnv.New32a()
		h.Write([]byte(ev.ID))
		if tries[ev.ID] <= int(h.Sum32()%3) {
			return fmt.Errorf("broker unavailable (try %d)", tries[ev.ID])
		}
		return nil
	}
	rec := newRecorder(t, fail)

	var (
		mu    sync.Mutex
		order = map[string][]string{} // key -> ids in commit order
		total int
	)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range txs {
			var msgs []outbox.Message
			for j := range perTx {
				key := fmt.Sprintf("k%d", (i*perTx+j*5)%7) // "k6" stands for no key
				if key == "k6" {
					key = ""
				}
				msgs = append(msgs, msg("t", key, i*perTx+j))
			}
			ids := e.publish(t, msgs...)
			mu.Lock()
			for j, id := range ids {
				order[msgs[j].Key] = append(order[msgs[j].Key], id)
			}
			total += len(ids)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()

	acked := func() int { return len(rec.ackedIDs()) }
	for i := 0; ; i++ {
		r := e.relay(t, rec, func(c *outbox.RelayConfig) { c.Owner, c.BatchSize = fmt.Sprintf("relay-%d", i), 5 })
		run(t, r)
		var other *outbox.Relay
		if i%3 == 1 { // a second relay alongside, for a while
			other = e.relay(t, rec, func(c *outbox.RelayConfig) { c.Owner, c.BatchSize = fmt.Sprintf("relay-%d-b", i), 3 })
			run(t, other)
		}
		before := acked()
		waitFor(t, "some events acknowledged", func() bool {
			return acked() >= before+15 || e.count(t, "sent") == int64(txs*perTx)
		})
		stop(t, r)
		if other != nil {
			stop(t, other)
		}
		if e.count(t, "sent") == int64(txs*perTx) {
			t.Logf("%d relays, %d events handed over, %d acknowledged", i+1, len(rec.handed()), acked())
			break
		}
	}
	<-published
	mu.Lock()
	defer mu.Unlock()
	if total != txs*perTx {
		t.Fatalf("published %d events, want %d", total, txs*perTx)
	}
	first := firstArrivals(rec.ackedEvents())
	for key, want := range order {
		if key == "" {
			if got := first[""]; len(got) != len(want) {
				t.Errorf("events without a key: %d published, %d committed", len(got), len(want))
			}
			continue
		}
		if got := first[key]; !slices.Equal(got, want) {
			t.Errorf("key %s: first arrivals in the order\n  %v\nwant the commit order\n  %v", key, got, want)
		}
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue`); n != 0 {
		t.Errorf("%d events still queued", n)
	}
}

// Two transactions publish an event of one key at once, and the one that drew the lower id commits
// last: the relay has already claimed the other one, the only one it could see. The late event, older
// by id, waits until the claimed one is sent: a key never has two events in flight, and the events
// arrive in commit order.
func TestLateOlderEventWaitsForTheClaimedEventOfItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	older, err := e.client.Publish(ctx, tx, msg("t", "k", 1))
	if err != nil {
		t.Fatal(err)
	}
	newer := e.publish(t, msg("t", "k", 2))

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rec := newRecorder(t, func(ev outbox.Event) error {
		if ev.ID == newer[0] {
			once.Do(func() { close(held); <-release })
		}
		return nil
	})
	run(t, e.relay(t, rec, func(c *outbox.RelayConfig) { c.Concurrency = 2 }))
	await(t, "the newer event in flight", held)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A claim finds the older event and puts it off (snoozed) instead of claiming it.
	waitFor(t, "a claim to look at the older event", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue q JOIN {schema}.outbox m USING (id)
			WHERE m.event_id::text = $1 AND (q.claimed OR q.run_at > now())`, older[0]) == 1
	})
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE claimed`); n != 1 {
		t.Errorf("%d events of key k claimed at once, want 1", n)
	}
	close(release)
	waitFor(t, "both events sent", func() bool { return e.count(t, "sent") == 2 })
	if got, want := rec.ackedIDs(), []string{newer[0], older[0]}; !slices.Equal(got, want) {
		t.Errorf("published %v, want %v (the commit order)", got, want)
	}
}

// An event whose Publisher returns a Permanent error is dead at once; one that keeps failing is dead
// after MaxAttempts attempts. Neither stops its key: the next event goes after them.
func TestDeadEventsLetTheirKeyGoOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.publish(t, msg("refused", "k", 1), msg("flaky", "k", 2), msg("fine", "k", 3))
	rec := newRecorder(t, func(ev outbox.Event) error {
		switch ev.Topic {
		case "refused":
			return txinbox.Permanent(errors.New("the broker refuses this event"))
		case "flaky":
			return errors.New("timeout")
		}
		return nil
	})
	run(t, e.relay(t, rec, func(c *outbox.RelayConfig) { c.MaxAttempts = 3 }))
	waitFor(t, "the last event sent", func() bool { return e.count(t, "sent") == 1 })
	check := func(id, state string, started, failed int, errPart string) {
		t.Helper()
		var s, le string
		var st, f int
		if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT state, attempts_started, attempts_failed, coalesce(last_error, '')
			FROM {schema}.outbox WHERE event_id::text = $1`), id).Scan(&s, &st, &f, &le); err != nil {
			t.Fatal(err)
		}
		if s != state || st != started || f != failed || !strings.Contains(le, errPart) {
			t.Errorf("event %s: %s, %d started, %d failed, error %q; want %s, %d, %d, %q", id, s, st, f, le, state, started, failed, errPart)
		}
	}
	check(ids[0], "dead", 1, 1, "permanent: the broker refuses")
	check(ids[1], "dead", 3, 3, "timeout")
	check(ids[2], "sent", 1, 0, "")
	var handed []string
	for _, ev := range rec.handed() {
		handed = append(handed, ev.Topic)
	}
	if want := []string{"refused", "flaky", "flaky", "flaky", "fine"}; !slices.Equal(handed, want) {
		t.Errorf("handed over %v, want %v", handed, want)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue`); n != 0 {
		t.Errorf("%d events still queued", n)
	}
}

// A relay stopped while its Publisher has not answered ends the call (its ctx) at Stop's deadline and
// hands the events back without charging an attempt: the next relay hands them over as attempt 1.
func TestStopHandsBackUnacknowledgedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.publish(t, msg("t", "k", 1), msg("t", "", 2))
	called := make(chan struct{})
	var once sync.Once
	r := e.relay(t, outbox.PublisherFunc(func(ctx context.Context, events []outbox.Event) error {
		once.Do(func() { close(called) })
		<-ctx.Done()
		return ctx.Err()
	}), func(c *outbox.RelayConfig) { c.Concurrency = 1 })
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	await(t, "the Publish call", called)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a call in flight: %v, want the deadline's error", err)
	}
	waitFor(t, "the events handed back", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE NOT claimed`) == 2
	})
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE attempts_started <> 0`); n != 0 {
		t.Errorf("%d events handed back were charged the attempt", n)
	}
	rec := newRecorder(t, nil)
	run(t, e.relay(t, rec, nil))
	waitFor(t, "both sent", func() bool { return e.count(t, "sent") == 2 })
	for _, ev := range rec.ackedEvents() {
		if ev.Attempt != 1 || !slices.Contains(ids, ev.ID) {
			t.Errorf("handed over again as %+v, want attempt 1", ev)
		}
	}
}

// A claim skips the queue rows another session has locked (a relay recording their outcome, stuck
// behind a rotation, say) instead of waiting for them: the other events go on meanwhile.
func TestClaimSkipsLockedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	locked := e.publish(t, msg("t", "a", 1))
	free := e.publish(t, msg("t", "b", 2))
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, e.SQL(`SELECT q.id FROM {schema}.outbox_queue q JOIN {schema}.outbox m USING (id)
		WHERE m.event_id::text = $1 FOR UPDATE OF q`), locked[0]); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t, nil)
	run(t, e.relay(t, rec, nil))
	waitFor(t, "the free event sent", func() bool { return slices.Contains(rec.ackedIDs(), free[0]) })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other event sent once its row is free", func() bool { return e.count(t, "sent") == 2 })
}

// A runner records a sent event in its next claim's transaction, and makes the next event of its key
// ready there after taking the claim lock: a claim that snoozed that next event while it still saw the
// sent one queued took its turn before, so the mark sees the snooze. Here the test holds the claim
// lock while the runner's transaction (event 1 recorded sent) waits for it; event 2 of the key
// commits, and the test's own claim, under the lock, still sees event 1 and snoozes event 2 for an
// hour. Once the lock is free, the runner's transaction must make event 2 ready and claim it.
func TestNextEventOfAKeySnoozedWhileItsRecordWaitsForTheClaimLockGoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.publish(t, msg("t", "k", 1))
	holder, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	var r *outbox.Relay
	first := make(chan struct{})
	var once sync.Once
	rec := newRecorder(t, func(ev outbox.Event) error {
		once.Do(func() {
			// The runner's next transaction, which records this event, waits for the lock taken now.
			if _, err := holder.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", outbox.ClaimLockKey(r)); err != nil {
				t.Error(err)
			}
			close(first)
		})
		return nil
	})
	r = e.relay(t, rec, func(c *outbox.RelayConfig) {
		c.Concurrency = 1
		outbox.NoListen(c)
		outbox.SetClaimTimeout(c, 40*time.Second)
	})
	run(t, r)
	await(t, "event 1 published", first)
	waitFor(t, "the runner's transaction waiting for the claim lock", func() bool {
		return e.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND ((classid::bigint << 32) | objid::bigint) = $1`, outbox.ClaimLockKey(r)) == 1
	})
	m2 := msg("t", "k", 2)
	m2.NotBefore = time.Now().Add(-time.Hour) // due for the test's claim, whose now() is its transaction's start
	e.publish(t, m2)
	rows, err := schemasql.Queries.OutboxClaim(ctx, schemasql.New(e.Schema).Wrap(holder), sqlc.OutboxClaimParams{
		Max: 10, SnoozeSeconds: 3600, LeaseSeconds: 60, Owner: pgtype.Text{String: "test", Valid: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != 0 {
		t.Fatalf("the test's claim returned %+v, want only the placeholder of a snooze", rows)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // the snooze is an hour
	for e.count(t, "sent") != 2 {
		if time.Now().After(deadline) {
			t.Fatal("event 2 stayed snoozed: its key's next event was not made ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdClaim installs, in e's schema, a statement trigger on outbox_queue that holds a claim (a
// statement updating the queue) of a session whose txinbox_test.hold_claim is set, once its snapshot
// is taken and before it reads a row, until the advisory lock of that setting's key is free. The
// claim reads the queue only through its two updates (snoozed, claimed), and an update fires its
// BEFORE STATEMENT triggers before it reads a row.
func (e *env) holdClaim(t *testing.T) {
	t.Helper()
	for _, sql := range []string{
		`CREATE FUNCTION {schema}.hold_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF current_setting('txinbox_test.hold_claim', true) <> '' THEN
				PERFORM pg_advisory_xact_lock_shared(current_setting('txinbox_test.hold_claim')::bigint);
			END IF;
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER hold_claim BEFORE UPDATE ON {schema}.outbox_queue
			FOR EACH STATEMENT EXECUTE FUNCTION {schema}.hold_claim()`,
	} {
		if _, err := e.Pool.Exec(context.Background(), e.SQL(sql)); err != nil {
			t.Fatal(err)
		}
	}
}

// A runner that stops records its last batch on its own (OutboxFinish, then OutboxReadyNext, each
// committed at once, outside the claim lock) while another relay's claim is under way: that claim
// took its snapshot before the record, so it still sees the sent event queued, and reaches the key's
// next event after the record. The next event was made ready (OutboxReadyNext's mark), and the claim
// must leave it so, not snooze it behind an event that has left: here the test's claim is held by a
// trigger between its snapshot and its first row, the snooze is an hour, and the next relay sends
// the event at once.
func TestClaimSeeingAFinishedEventLeavesItsKeysReadyEventUnsnoozed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.holdClaim(t)
	first := e.publish(t, msg("t", "k", 1))
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := e.relay(t, newRecorder(t, func(ev outbox.Event) error {
		if ev.ID == first[0] {
			once.Do(func() { close(held); <-release })
		}
		return nil
	}), func(c *outbox.RelayConfig) { c.Concurrency = 1; outbox.NoListen(c) })
	run(t, r)
	await(t, "event 1 in flight", held)
	// Event 2 of the key, due, seen by no claim yet: the relay's only runner is publishing event 1.
	second := e.publish(t, msg("t", "k", 2))

	h := fnv.New64a()
	h.Write([]byte("hold_claim\x00" + e.Schema))
	holdKey := int64(h.Sum64() >> 1)
	gate, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Rollback(ctx) }()
	if _, err := gate.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", holdKey); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "SELECT set_config('txinbox_test.hold_claim', $1, false)", strconv.FormatInt(holdKey, 10)); err != nil {
		t.Fatal(err)
	}
	type claimResult struct {
		rows []sqlc.OutboxClaimRow
		err  error
	}
	claimDone := make(chan claimResult, 1)
	go func() {
		var res claimResult
		res.err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			db := schemasql.New(e.Schema).Wrap(tx)
			if err := schemasql.Queries.OutboxClaimLock(ctx, db, outbox.ClaimLockKey(r)); err != nil {
				return err
			}
			var err error
			res.rows, err = schemasql.Queries.OutboxClaim(ctx, db, sqlc.OutboxClaimParams{
				Max: 10, SnoozeSeconds: 3600, LeaseSeconds: 60, Owner: pgtype.Text{String: "test", Valid: true}})
			return err
		})
		claimDone <- res
	}()
	waitFor(t, "the test's claim held after its snapshot", func() bool {
		return e.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND ((classid::bigint << 32) | objid::bigint) = $1`, holdKey) == 1
	})

	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute) // only keeps a hang from lasting
		defer cancel()
		stopped <- r.Stop(sctx)
	}()
	waitFor(t, "the relay stopping", func() bool { return outbox.Stopping(r) })
	close(release) // event 1 acknowledged; the stopping runner records it on its own
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stopping the relay: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("gave up waiting for the relay to stop")
	}
	if n := e.count(t, "sent"); n != 1 {
		t.Fatalf("%d events sent after the relay's record, want event 1", n)
	}
	if err := gate.Rollback(ctx); err != nil { // the test's claim goes on
		t.Fatal(err)
	}
	var res claimResult
	select {
	case res = <-claimDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("gave up waiting for the test's claim")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.rows) != 0 {
		t.Errorf("the test's claim returned %+v, want nothing (event 2 neither claimed behind event 1 nor snoozed)", res.rows)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE run_at > now()`); n != 0 {
		t.Fatal("event 2 was put off (snoozed) by a claim that still saw event 1 queued")
	}

	rec := newRecorder(t, nil)
	run(t, e.relay(t, rec, nil))
	deadline := time.Now().Add(30 * time.Second) // the snooze is an hour
	for !slices.Contains(rec.ackedIDs(), second[0]) {
		if time.Now().After(deadline) {
			t.Fatal("event 2 stayed snoozed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
