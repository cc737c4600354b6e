package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// step is one message of the ordering tests: ordering key, sequence number within it.
type step struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

func (s step) id() string { return fmt.Sprintf("%s/%d", s.Key, s.Seq) }

// handledLog creates {schema}.handled, where handlers log what they handled in their transaction, so
// that only committed attempts count.
func (e *env) handledLog(t *testing.T) {
	t.Helper()
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`CREATE TABLE {schema}.handled (
		n bigserial PRIMARY KEY, okey text NOT NULL, seq int NOT NULL, handled_at timestamptz NOT NULL DEFAULT clock_timestamp())`)); err != nil {
		t.Fatal(err)
	}
}

func logHandled(ctx context.Context, tx pgx.Tx, schema string, s step) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "handled"}.Sanitize()+" (okey, seq) VALUES ($1, $2)", s.Key, s.Seq)
	return err
}

// handledOrder returns, per ordering key, the sequence numbers in the order their handlers committed.
func (e *env) handledOrder(t *testing.T) map[string][]int {
	t.Helper()
	rows, err := e.Pool.Query(context.Background(), e.SQL(`SELECT okey, seq FROM {schema}.handled ORDER BY n`))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for rows.Next() {
		var k string
		var s int
		if err := rows.Scan(&k, &s); err != nil {
			t.Fatal(err)
		}
		out[k] = append(out[k], s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitProgress waits until count() reaches want, failing if it stops moving for a minute.
func (e *env) waitProgress(t *testing.T, what string, count func() int64, want int64) {
	t.Helper()
	last, moved := int64(-1), time.Now()
	for {
		n := count()
		if n == want {
			return
		}
		if n != last {
			last, moved = n, time.Now()
		}
		if time.Since(moved) > time.Minute {
			e.Report(t)
			t.Fatalf("%s: stuck at %d of %d", what, n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) receiveSteps(t *testing.T, steps []step, mod func(*inbox.Message)) {
	t.Helper()
	for i := 0; i < len(steps); i += 100 {
		var msgs []inbox.Message
		for _, s := range steps[i:min(i+100, len(steps))] {
			m := inbox.Message{Consumer: "ledger", Key: s.id(), Kind: "step", OrderingKey: s.Key,
				Payload: fmt.Appendf(nil, `{"key":%q,"seq":%d}`, s.Key, s.Seq)}
			if mod != nil {
				mod(&m)
			}
			msgs = append(msgs, m)
		}
		if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
	}
}

// 50 ordering keys x 200 messages, received in a shuffled global order, handled by 8 concurrent
// batches: each key's messages are handled in the order they were received, one at a time, while
// different keys run in parallel. "mixed": the odd messages of every key are of a kind with a single
// handler, the even ones of a kind with a batch handler (one claim holds both, and a key's order
// holds across them).
func TestPerKeyOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"single", "mixed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			perKeyOrderUnderConcurrency(t, mode == "mixed")
		})
	}
}

func perKeyOrderUnderConcurrency(t *testing.T, mixed bool) {
	const nkeys, nseq = 50, 200
	e := newEnv(t)
	e.handledLog(t)
	var steps []step
	for k := range nkeys {
		for s := range nseq {
			steps = append(steps, step{Key: fmt.Sprint("acct-", k), Seq: s})
		}
	}
	rand.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
	receipt := map[string][]int{} // per key, the sequence numbers in the order received
	for _, s := range steps {
		receipt[s.Key] = append(receipt[s.Key], s.Seq)
	}
	var mod func(*inbox.Message)
	if mixed {
		mod = func(m *inbox.Message) {
			if m.Payload[len(m.Payload)-2]%2 == 0 { // the last digit of seq
				m.Kind = "step-batch"
			}
		}
	}
	e.receiveSteps(t, steps, mod)

	var (
		mu          sync.Mutex
		inFlight    = map[string]int{}
		maxDistinct int
	)
	enter := func(okeys ...string) func() {
		mu.Lock()
		for _, k := range okeys {
			inFlight[k]++
			if inFlight[k] > 1 {
				t.Errorf("key %s: two messages in flight at once", k)
			}
		}
		maxDistinct = max(maxDistinct, len(inFlight))
		mu.Unlock()
		return func() {
			mu.Lock()
			for _, k := range okeys {
				if inFlight[k]--; inFlight[k] == 0 {
					delete(inFlight, k)
				}
			}
			mu.Unlock()
		}
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "step", func(ctx context.Context, tx pgx.Tx, m *worker.Message[step]) error {
		defer enter(m.OrderingKey)()
		time.Sleep(200 * time.Microsecond) // long enough for batches to overlap
		return logHandled(ctx, tx, e.Schema, m.Payload)
	})
	if mixed {
		worker.HandleBatch(hs, "step-batch", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[step]) error {
			okeys := make([]string, len(msgs))
			for i, m := range msgs {
				okeys[i] = m.OrderingKey
			}
			defer enter(okeys...)()
			time.Sleep(200 * time.Microsecond)
			for _, m := range msgs {
				if err := logHandled(ctx, tx, e.Schema, m.Payload); err != nil {
					return err
				}
			}
			return nil
		})
	}
	run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 8 }))
	// A shared, loaded server can make this slow: fail only when nothing moves for a minute (with the
	// snooze safety net off, a message left behind by its key would stall it for good).
	e.waitProgress(t, "all handled", func() int64 { return e.count(t, "completed") }, nkeys*nseq)

	got := e.handledOrder(t)
	for k, want := range receipt {
		if !slices.Equal(got[k], want) {
			t.Fatalf("key %s handled in order %v,\nreceived in order %v", k, got[k], want)
		}
	}
	if maxDistinct < 2 {
		t.Fatalf("at most %d key(s) in flight at once: no parallelism across keys", maxDistinct)
	}
	t.Logf("up to %d distinct keys in flight at once", maxDistinct)
}

// A failing message holds back only its own key: until it succeeds, or is dead, the later messages
// of its key wait and every other key proceeds.
func TestFailingMessageHoldsBackOnlyItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.handledLog(t)
	const n = 5
	var steps []step
	for s := range n {
		for _, k := range []string{"retry", "dead", "free"} {
			steps = append(steps, step{Key: k, Seq: s})
		}
	}
	e.receiveSteps(t, steps, nil)
	var freeDone atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "step", func(ctx context.Context, tx pgx.Tx, m *worker.Message[step]) error {
		s := m.Payload
		switch {
		case s.Key == "retry" && s.Seq == 1 && freeDone.Load() < n:
			// Fails until every message of key "free" is done: if it held back other keys too, this
			// would never succeed.
			return errors.New("not yet")
		case s.Key == "dead" && s.Seq == 1:
			return txinbox.Permanent(errors.New("rejected"))
		}
		if err := logHandled(ctx, tx, e.Schema, s); err != nil {
			return err
		}
		if s.Key == "free" {
			freeDone.Add(1) // counted before commit: at worst "retry/1" succeeds one attempt early
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 1000})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 4 }))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })

	got := e.handledOrder(t)
	if want := []int{0, 1, 2, 3, 4}; !slices.Equal(got["retry"], want) || !slices.Equal(got["free"], want) {
		t.Fatalf("retry: %v, free: %v; want %v", got["retry"], got["free"], want)
	}
	if want := []int{0, 2, 3, 4}; !slices.Equal(got["dead"], want) {
		t.Fatalf("dead: %v, want %v", got["dead"], want)
	}
	if s, _, failed, _ := e.state(t, "retry/1"); s != "completed" || failed == 0 {
		t.Fatalf("retry/1: %s after %d failures", s, failed)
	}
	if s, _, _, _ := e.state(t, "dead/1"); s != "dead" {
		t.Fatalf("dead/1: %s", s)
	}
	// The key's later messages ran only after its failing message was settled.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.handled h JOIN {schema}.inbox m
		ON m.key = h.okey || '/1' WHERE h.seq > 1 AND h.handled_at < m.completed_at`); n != 0 {
		t.Fatalf("%d later messages ran before their key's failing message was settled", n)
	}
}

// A message with NotBefore is not handled before it; a delayed message delays the later messages of
// its ordering key (they keep their order) and no other key.
func TestDelayedMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.handledLog(t)
	now := time.Now()
	soon, far := now.Add(1500*time.Millisecond), now.Add(time.Hour)
	e.receiveSteps(t, []step{{"soon", 0}, {"far", 0}, {"other", 0}}, func(m *inbox.Message) {
		switch m.OrderingKey {
		case "soon":
			m.NotBefore = soon
		case "far":
			m.NotBefore = far
		}
	})
	// Later messages of the same keys, not delayed themselves.
	e.receiveSteps(t, []step{{"soon", 1}, {"far", 1}, {"other", 1}}, nil)
	// A delayed message without an ordering key.
	if _, err := e.client.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: "lone", Kind: "step",
		Payload: []byte(`{"key":"lone","seq":0}`), NotBefore: soon}); err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "step", func(ctx context.Context, tx pgx.Tx, m *worker.Message[step]) error {
		return logHandled(ctx, tx, e.Schema, m.Payload)
	})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.PollInterval = 50 * time.Millisecond }))
	waitFor(t, "the due messages", func() bool { return e.count(t, "completed") == 5 })

	got := e.handledOrder(t)
	for k, want := range map[string][]int{"soon": {0, 1}, "other": {0, 1}, "lone": {0}, "far": nil} {
		if !slices.Equal(got[k], want) {
			t.Fatalf("%s handled %v, want %v", k, got[k], want)
		}
	}
	// Handled at or after the NotBefore stored with the message (the database clock decides claims);
	// soon/1, not delayed itself, after the NotBefore of soon/0 ahead of it.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key IN ('soon/0', 'lone') AND next_run_at = $1`, soon); n != 2 {
		t.Fatalf("NotBefore stored for %d of 2 messages", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.handled h, {schema}.inbox m
		WHERE h.okey IN ('soon', 'lone') AND m.key = 'soon/0' AND h.handled_at >= m.next_run_at`); n != 3 {
		t.Fatalf("%d of 3 messages handled at or after their NotBefore", n)
	}
	// "far" is an hour away: both of its messages wait, behind it.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key LIKE 'far/%' AND state = 'pending' AND attempts_started = 0`); n != 2 {
		t.Fatalf("far: %d of 2 messages still pending", n)
	}
}

// Snoozing many blocked messages (here 600 rows, each update slowed to 25 ms by a trigger, as on a
// loaded server or a Citus cluster: 15 s) must not fail a batch that finishes meanwhile, nor keep a
// finished key's next message waiting for its snooze. The finishing batch waits for the snooze lock
// before it commits, within its statement timeout (here 5 s: a handler Timeout of 4 s), and its
// ReadyNext after it: the rescuer snoozes one claim's worth (50 rows, 1.25 s) per transaction. Message
// a/0 completes at its first attempt, and a/1, snoozed in the snooze's first rows, runs then, not after
// the snooze (an hour here).
func TestLongSnoozeLetsAFinishedKeyGoOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if e.distributed(t) {
		t.Skip("Citus has no triggers on distributed tables")
	}
	e.handledLog(t)
	e.receiveSteps(t, []step{{"a", 0}, {"a", 1}}, nil)
	blocked := []step{{"z", 0}}
	for i := 1; i <= 600; i++ {
		blocked = append(blocked, step{"z", i})
	}
	// z/0 waits an hour, so z/1..z/600 stay blocked behind it: the rows a snooze puts off.
	e.receiveSteps(t, blocked, func(m *inbox.Message) {
		if m.Key == "z/0" {
			m.NotBefore = time.Now().Add(time.Hour)
		}
	})
	for _, q := range []string{
		`CREATE FUNCTION {schema}.slow_snooze() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN PERFORM pg_sleep(0.025); RETURN NEW; END $$`,
		`CREATE TRIGGER slow_snooze BEFORE UPDATE ON {schema}.inbox_queue FOR EACH ROW
			WHEN (NEW.run_at > OLD.run_at + interval '10 minutes') EXECUTE FUNCTION {schema}.slow_snooze()`,
	} {
		if _, err := e.Pool.Exec(context.Background(), e.SQL(q)); err != nil {
			t.Fatal(err)
		}
	}

	snoozing := func() bool {
		return e.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE state = 'active'
			AND query LIKE '%SnoozeBlocked%' AND position($1 in query) > 0`, e.Schema) > 0
	}
	var a0Calls atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "step", func(ctx context.Context, tx pgx.Tx, m *worker.Message[step]) error {
		if m.Payload == (step{"a", 0}) {
			a0Calls.Add(1)
			// Finish a/0 while the snooze runs, after it has put off a/1 (its first row).
			for !snoozing() {
				if err := ctx.Err(); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
		}
		return logHandled(ctx, tx, e.Schema, m.Payload)
	}, worker.HandlerConfig{Timeout: 4 * time.Second})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.BatchSize = 50 }))
	waitFor(t, "a/1", func() bool { return e.count(t, "completed") == 2 })
	if got := e.handledOrder(t)["a"]; !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("a handled %v, want [0 1]", got)
	}
	if n := a0Calls.Load(); n != 1 {
		t.Fatalf("a/0 handled %d times, want once: its finishing batch failed waiting for the snooze", n)
	}
}
