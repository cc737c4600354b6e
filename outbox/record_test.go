package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
)

var errAnswerLost = errors.New("test: the connection was lost before the commit's answer came")

// lostAnswerDB is a pool whose next pipeline that records a batch (a claim carrying an OutboxFinish)
// commits, but whose answer is lost: once the server has committed it, its Close runs after and
// returns errAnswerLost, as when the connection drops between the commit and its answer.
type lostAnswerDB struct {
	*pgxpool.Pool
	lose  atomic.Bool
	after func()
}

func (d *lostAnswerDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br := d.Pool.SendBatch(ctx, b)
	records := slices.ContainsFunc(b.QueuedQueries, func(q *pgx.QueuedQuery) bool {
		return strings.HasPrefix(q.SQL, "-- name: OutboxFinish ")
	})
	if records && d.lose.CompareAndSwap(true, false) {
		return &lostAnswer{BatchResults: br, after: d.after}
	}
	return br
}

type lostAnswer struct {
	pgx.BatchResults
	after func()
}

func (l *lostAnswer) Close() error {
	if err := l.BatchResults.Close(); err != nil {
		return err
	}
	l.after()
	return errAnswerLost
}

// row is what a record writes about the test's one event: its attempts, retry time and state.
type row struct {
	started, failed int
	nextRunAt       time.Time
	runAt           time.Time // of its queue row
	state           string
	queued, claimed bool
}

func (e *env) row(t *testing.T) row {
	t.Helper()
	r, err := e.readRow()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) readRow() (r row, err error) {
	var runAt *time.Time
	var claimed *bool
	err = e.Pool.QueryRow(context.Background(), e.SQL(`SELECT m.attempts_started, m.attempts_failed, m.next_run_at, m.state,
			q.run_at, q.claimed
		FROM {schema}.outbox m LEFT JOIN {schema}.outbox_queue q USING (id)`)).
		Scan(&r.started, &r.failed, &r.nextRunAt, &r.state, &runAt, &claimed)
	if runAt != nil {
		r.runAt, r.queued, r.claimed = *runAt, true, *claimed
	}
	return r, err
}

// A claim that carries the record of the runner's last batch commits, but its answer is lost (the
// connection drops after the commit): the runner, which cannot tell, records the batch again on its
// own. The event failed and is to be retried: the claim's transaction requeued it, so the second
// record finds its queue row no longer claimed and changes nothing: the failed attempt is counted
// once and its retry time is not pushed back. The Tracer is told the outcome once (it was recorded),
// and the relay does not log the event as taken over by another relay (nobody took it over).
func TestRecordAfterAClaimsLostCommitAnswerRecordsNothingTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.publish(t, msg("t", "k", 1))
	pool, err := pgxpool.New(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := &lostAnswerDB{Pool: pool}
	db.lose.Store(true)
	lost := make(chan struct{})
	var committed row // the event as the claim whose answer was lost left it
	var readErr error
	db.after = func() {
		committed, readErr = e.readRow()
		close(lost)
	}
	var calls atomic.Int64
	rec := &tracerec.Recorder{}
	logs := &logRecords{errs: map[string][]string{}}
	r := relayOn(t, txinbox.Store{DB: db, Schema: e.Schema, Tracer: rec, Logger: slog.New(logs)}, outbox.PublisherFunc(func(context.Context, []outbox.Event) error {
		calls.Add(1)
		return errors.New("broker unavailable")
	}), func(c *outbox.RelayConfig) {
		c.Concurrency = 1
		outbox.NoListen(c)
		c.Backoff = txinbox.BackoffFunc(func(int) time.Duration { return time.Hour }) // no second attempt in this test
	})
	run(t, r)
	await(t, "the claim carrying the failed attempt's record, its answer lost", lost)
	stop(t, r) // the runner recorded the batch on its own, after its claim's error
	if readErr != nil {
		t.Fatal(readErr)
	}
	if !logs.has("txinbox: outbox claim failed", errAnswerLost.Error()) {
		t.Fatal("the lost answer was not logged as the claim's failure: the test proves nothing")
	}
	if committed.failed != 1 || committed.state != "pending" || !committed.queued || committed.claimed {
		t.Fatalf("the claim's transaction left the event %+v, want it requeued after one failed attempt", committed)
	}

	now := e.row(t)
	if now.failed != 1 || now.started != 1 {
		t.Errorf("after the second record: %d attempts started, %d failed; want 1, 1 (the failure counted once)", now.started, now.failed)
	}
	if !now.nextRunAt.Equal(committed.nextRunAt) || !now.runAt.Equal(committed.runAt) {
		t.Errorf("the retry time moved from %v (queue %v) to %v (queue %v): the retry was pushed back by the second record",
			committed.nextRunAt, committed.runAt, now.nextRunAt, now.runAt)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d Publish calls, want 1", n)
	}
	if got := rec.Ops(txinbox.OpRelayed); len(got) != 1 || got[0].End.Outcome != txinbox.OutcomeRetry || got[0].Start.Attempt != 1 {
		t.Errorf("the Tracer was told %+v, want the one recorded retry of attempt 1", got)
	}
	if got := logs.messages("taken over"); len(got) != 0 {
		t.Errorf("logged %q: nobody took the event over, its outcome was recorded by the claim whose answer was lost", got)
	}
	if got := logs.messages("recorded already"); len(got) != 1 {
		t.Errorf("logged %q, want one record saying that the outcome was recorded already", got)
	}
}
