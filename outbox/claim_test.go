package outbox_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// logRecords keeps what a relay logs.
type logRecords struct {
	mu   sync.Mutex
	errs map[string][]string // message -> the "err" attribute of each record
	msgs []string            // every record's message, in order
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			l.errs[r.Message] = append(l.errs[r.Message], a.Value.String())
		}
		return true
	})
	return nil
}

// messages returns the messages logged that contain sub, in order.
func (l *logRecords) messages(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			out = append(out, m)
		}
	}
	return out
}

func (l *logRecords) has(msg, sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs[msg] {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

// A claim runs as one pipeline (the statement_timeout, the claim lock, the claim) on a pool: the
// The claim bound still bounds its wait for the claim lock (the claim is cancelled by statement_timeout,
// SQLSTATE 57014, and nothing of it is committed), and once the lock is free the next claim takes
// the event, with its first attempt: the cancelled claim charged none.
func TestClaimTimeoutBoundsAPipelinedClaimWaitingForTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.publish(t, msg("t", "k", 1))
	logs := &logRecords{errs: map[string][]string{}}
	rec := newRecorder(t, nil)
	r := relayOn(t, e.storeLogging(slog.New(logs)), rec, func(c *outbox.RelayConfig) {
		c.Lease, c.Concurrency = 2*time.Second, 1
		outbox.SetClaimTimeout(c, 200*time.Millisecond)
		outbox.NoListen(c)
	})
	holder, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", outbox.ClaimLockKey(r)); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	waitFor(t, `a claim cancelled by statement_timeout (SQLSTATE 57014) logged`, func() bool {
		return logs.has("txinbox: outbox claim failed", "57014")
	})
	if got := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE claimed OR attempts_started > 0`); got != 0 {
		t.Fatalf("%d queue rows claimed or charged while the claim lock was held elsewhere, want 0", got)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event sent", func() bool { return e.count(t, "sent") == 1 })
	evs := rec.ackedEvents()
	if len(evs) != 1 || evs[0].Attempt != 1 {
		t.Fatalf("acknowledged %+v, want the event once, at attempt 1", evs)
	}
}

// finishTracer counts OutboxFinish statements sent in a pipeline (a claim's) and on their own.
type finishTracer struct {
	mu                  sync.Mutex
	inBatch, standalone int
}

func (f *finishTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (f *finishTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.HasPrefix(d.SQL, "-- name: OutboxFinish ") {
		f.mu.Lock()
		f.inBatch++
		f.mu.Unlock()
	}
}

func (f *finishTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (f *finishTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "-- name: OutboxFinish ") {
		f.mu.Lock()
		f.standalone++
		f.mu.Unlock()
	}
	return ctx
}

func (f *finishTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (f *finishTracer) counts() (inBatch, standalone int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inBatch, f.standalone
}

// A runner records a batch's outcomes at the start of its next claim's pipeline (one round trip and
// one commit for both): while a backlog drains, no OutboxFinish goes on its own, and every event is
// recorded sent, each key's events in order.
func TestRelayRecordsEachBatchInItsNextClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var msgs []outbox.Message
	for i := range 60 {
		msgs = append(msgs, msg("t", []string{"", "a", "b"}[i%3], i))
	}
	e.publish(t, msgs...)
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &finishTracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rec := newRecorder(t, nil)
	r := relayOn(t, txinbox.Store{DB: pool, Schema: e.Schema}, rec, func(c *outbox.RelayConfig) { c.BatchSize, c.Concurrency = 10, 1 })
	run(t, r)
	waitFor(t, "every event sent", func() bool { return e.count(t, "sent") == 60 })
	stop(t, r)
	inBatch, standalone := tr.counts()
	if inBatch == 0 || standalone != 0 {
		t.Fatalf("OutboxFinish ran %d times in a claim's pipeline and %d times on its own, want only in pipelines", inBatch, standalone)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue`); n != 0 {
		t.Fatalf("%d events still queued", n)
	}
}

// When the claim that carries a batch's record fails (here: its wait for the claim lock, held
// elsewhere, outlasts the claim bound), the record is rolled back with it, and the runner records the
// batch on its own at once: the event is sent while the lock is still held.
func TestRecordOfAFailedClaimGoesOnItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.publish(t, msg("t", "k", 1))
	holder, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	logs := &logRecords{errs: map[string][]string{}}
	var r *outbox.Relay
	published := make(chan struct{})
	rec := newRecorder(t, func(outbox.Event) error {
		// The next claim, which carries this event's record, waits for the lock taken now.
		if _, err := holder.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", outbox.ClaimLockKey(r)); err != nil {
			t.Error(err)
		}
		close(published)
		return nil
	})
	r = relayOn(t, e.storeLogging(slog.New(logs)), rec, func(c *outbox.RelayConfig) {
		c.Lease, c.Concurrency = 2*time.Second, 1
		outbox.SetClaimTimeout(c, 200*time.Millisecond)
		outbox.NoListen(c)
	})
	run(t, r)
	await(t, "the event published", published)
	waitFor(t, "the event sent while the claim lock is held elsewhere", func() bool { return e.count(t, "sent") == 1 })
	// The runner records the batch before the engine logs the failed claim: wait for the log too.
	waitFor(t, "a claim cancelled by statement_timeout (SQLSTATE 57014) logged (else the test proves nothing)", func() bool {
		return logs.has("txinbox: outbox claim failed", "57014")
	})
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}
