package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
	"github.com/txinbox/txinbox/worker"
)

// Crash accounting of the claim inside the batch transaction (migration 00011): a batch records its
// messages (inbox_batch) before its handlers run; its commit deletes that row; a row whose
// transaction ended otherwise is charged by a rescuer, once.

// A process killed inside its batch transaction (its handler blocked after writing its effect):
// nothing of the batch is applied, its messages are free at once (the server rolled the transaction
// back), the batch's attempt is charged once by the rescuer of another process, and every message is
// then applied exactly once.
func TestKilledInsideTheClaimingTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 40)...)
	marker := filepath.Join(t.TempDir(), "hung")
	cmd := startChild(t, e, "hang", "m-25", marker)
	waitFor(t, "the child to reach m-25", func() bool { _, err := os.Stat(marker); return err == nil })
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	e.waitAborted(t)
	batch := e.inFlight(t) // the messages of the batches killed (m-25's, and perhaps another runner's)

	// Nothing applied, nothing charged yet: the rows are as the claims found them.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'm-25'`); n != 0 {
		t.Fatalf("m-25's effect survived the kill (%d)", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'm-25' AND state = 'pending' AND attempts_started = 0`); n != 1 {
		t.Fatal("m-25's inbox row changed before the batch was charged")
	}

	rec := &tracerec.Recorder{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	// The default Timeout and Lease: the killed batch's messages are free at once, and a statement
	// stalled on a loaded machine must not charge an attempt that this test counts.
	run(t, e.with(rec).pool(t, hs, nil))
	waitFor(t, "all completed", func() bool { return e.count(t, "completed") == 40 })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 40 {
		t.Fatalf("effects = %d, want 40", n)
	}
	// The killed batch's messages: the charge and their run; the others: their run only.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE attempts_started = 2`); n != batch {
		t.Fatalf("%d messages charged once for the killed batch, want its %d", n, batch)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE attempts_started NOT IN (1, 2) OR attempts_failed <> 0`); n != 0 {
		t.Fatalf("%d messages charged other than once per attempt", n)
	}
	if _, _, batches := takeovers(rec); batches < 1 {
		t.Fatal("no batch charged")
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_batch`); n != 0 {
		t.Fatalf("%d batch rows left", n)
	}
}

// A batch left behind is charged once, however many rescuers find it at the same moment: the second
// charge waits for the first (both delete the batch's row) and then charges nothing. A batch whose
// transaction is too old for pg_xact_status (here the transaction id 3) is charged too: had it
// committed, its commit would have deleted its row.
func TestLeftBehindBatchIsChargedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("c", 4)...)
	ctx := context.Background()
	st := schemasql.New(e.Schema)
	var ids []int64
	rows, err := e.Pool.Query(ctx, e.SQL(`SELECT id FROM {schema}.inbox ORDER BY id`))
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	record, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(e.Pool), sqlc.RecordBatchParams{Consumer: "ledger", Xid: "3", Ids: ids, Owner: "killed"})
	if err != nil {
		t.Fatal(err)
	}
	if statuses, err := schemasql.Queries.XactStatuses(ctx, st.Wrap(e.Pool), []string{"3"}); err != nil || len(statuses) != 1 || statuses[0] != "" {
		t.Fatalf("status of transaction 3: %q, %v; want empty (too old)", statuses, err)
	}

	first, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(ctx) }()
	charged, err := schemasql.Queries.ChargeBatch(ctx, st.Wrap(first), "ledger", record)
	if err != nil || len(charged) != len(ids) {
		t.Fatalf("first charge: %d messages, %v", len(charged), err)
	}
	second := make(chan int)
	go func() {
		c, err := schemasql.Queries.ChargeBatch(ctx, st.Wrap(e.Pool), "ledger", record)
		if err != nil {
			t.Error(err)
		}
		second <- len(c)
	}()
	waiting := `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ChargeBatch%' AND query LIKE '%' || $1 || '%'`
	if e.distributed(t) {
		// On Citus the second charge waits on the worker holding the consumer's shard.
		waiting = `SELECT count(*) FROM citus_stat_activity c JOIN citus_stat_activity w USING (global_pid)
			WHERE NOT c.is_worker_query AND c.query LIKE '%ChargeBatch%' AND c.query LIKE '%' || $1 || '%'
			AND w.is_worker_query AND w.wait_event_type = 'Lock'`
	}
	waitFor(t, "the second charge to wait for the first", func() bool { return e.Count(t, waiting, e.Schema) == 1 })
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-second; n != 0 {
		t.Fatalf("the second charge charged %d messages, want 0", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue WHERE attempts_started = 1 AND group_crashes = 1 AND isolate = 2 AND token = 1`); n != int64(len(ids)) {
		t.Fatalf("%d of %d messages charged once and isolated in halves", n, len(ids))
	}
}

// A worker whose batch rolled back settles it (FinishBatch of its culprit's failure, SettleBatch: its
// row deleted, the messages it held isolated) only if the rescuer has not charged it first: after a
// charge, neither changes anything (the charge gave the messages a new token), so nothing is charged
// twice.
func TestSettleAfterChargeChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("h", 3)...)
	ctx := context.Background()
	st := schemasql.New(e.Schema)
	rows, err := e.Pool.Query(ctx, e.SQL(`SELECT id, token FROM {schema}.inbox_queue ORDER BY id`))
	if err != nil {
		t.Fatal(err)
	}
	type claim struct{ ID, Token int64 }
	claims, err := pgx.CollectRows(rows, pgx.RowToStructByPos[claim])
	if err != nil {
		t.Fatal(err)
	}
	ids, tokens := make([]int64, len(claims)), make([]int64, len(claims))
	for i, c := range claims {
		ids[i], tokens[i] = c.ID, c.Token
	}
	record, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(e.Pool), sqlc.RecordBatchParams{Consumer: "ledger", Xid: "3", Ids: ids, Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemasql.Queries.ChargeBatch(ctx, st.Wrap(e.Pool), "ledger", record); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT string_agg(row(id, token, attempts_started, isolate, group_size, group_crashes)::text, ',' ORDER BY id)
			FROM {schema}.inbox_queue`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()
	n := len(ids)
	keys, outcomes, texts, delays, uncount := make([]string, n), make([]string, n), make([]string, n), make([]float64, n), make([]int32, n)
	for i := range ids {
		keys[i], outcomes[i], texts[i], delays[i] = fmt.Sprint("h-", i), "retry", "the culprit's failure", 60
	}
	if n, err := schemasql.Queries.FinishBatch(ctx, st.Wrap(e.Pool), sqlc.FinishBatchParams{Consumer: "ledger", Ids: ids, Keys: keys,
		Tokens: tokens, Outcomes: outcomes, Errors: texts, Results: make([]string, len(ids)), Delays: delays, Uncount: uncount,
		RetentionSeconds: 60, StartedAt: pgtype.Timestamptz{Valid: true}}); err != nil || n != 0 {
		t.Fatalf("a failure recorded after the charge: %d, %v", n, err)
	}
	if n, err := schemasql.Queries.SettleBatch(ctx, st.Wrap(e.Pool), sqlc.SettleBatchParams{Consumer: "ledger", Batch: record, HeldIds: ids, HeldTokens: tokens}); err != nil || n != 0 {
		t.Fatalf("settle after the charge: %d, %v", n, err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("the settle after the charge changed the messages:\n%s\n%s", before, after)
	}
}
