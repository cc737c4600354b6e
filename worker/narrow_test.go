package worker_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// A claim is a row lock of the batch transaction and writes nothing (migration 00011): neither the
// inbox row nor the queue row changes until the finish, which counts the attempt and bumps the token
// in the same statement. A batch that rolls back leaves both rows as they were; a finish with the
// token of a claim that was charged by the rescuer since (its batch's row gone) records nothing.
func TestClaimWritesNothingUntilTheFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "k")
	ctx := context.Background()
	st := schemasql.New(e.Schema)
	rowsNow := func() string {
		t.Helper()
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT row(m.state, m.owner, m.token, m.attempts_started, m.attempts_failed,
			m.lease_until, m.started_at, m.completed_at, q.token, q.attempts_started, q.run_at, q.isolate)::text
			FROM {schema}.inbox m LEFT JOIN {schema}.inbox_queue q USING (id, consumer)`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	claim := func(tx pgx.Tx) sqlc.ClaimBatchRow {
		t.Helper()
		rows, err := schemasql.Queries.ClaimBatch(ctx, st.Wrap(tx), sqlc.ClaimBatchParams{Consumer: "ledger", Max: 10})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %v, %v", rows, err)
		}
		return rows[0]
	}
	finish := func(db sqlc.DBTX, r sqlc.ClaimBatchRow) int64 {
		t.Helper()
		n, err := schemasql.Queries.FinishBatch(ctx, st.Wrap(db), sqlc.FinishBatchParams{Consumer: "ledger", RetentionSeconds: 3600,
			StartedAt: pgtype.Timestamptz{Valid: true, Time: r.ReceivedAt.Time}, Ids: []int64{r.ID}, Keys: []string{r.Key},
			Tokens: []int64{r.Token}, Outcomes: []string{"completed"}, Errors: []string{""}, Results: []string{""},
			Delays: []float64{0}, Uncount: []int32{0}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	before := rowsNow()
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := claim(tx)
	if first.Token != 0 || first.AttemptsStarted != 0 {
		t.Fatalf("first claim: token %d, attempts %d", first.Token, first.AttemptsStarted)
	}
	if got := rowsNow(); got != before {
		t.Fatalf("the claim wrote the message's rows:\n%s\n%s", before, got)
	}
	// A batch that never committed, charged by the rescuer: its message gets a new token.
	var xid string
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	record, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(e.Pool), sqlc.RecordBatchParams{Consumer: "ledger", Xid: xid, Ids: []int64{first.ID}, Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rowsNow(); got != before {
		t.Fatalf("the rolled-back batch changed the message's rows:\n%s\n%s", before, got)
	}
	if state, _, _, _ := e.state(t, "k"); state != "processing" {
		t.Fatalf("listed in a batch's row: %s, want processing", state)
	}
	if charged, err := schemasql.Queries.ChargeBatch(ctx, st.Wrap(e.Pool), "ledger", record); err != nil || len(charged) != 1 {
		t.Fatalf("charge: %v, %v", charged, err)
	}
	if n := finish(e.Pool, first); n != 0 {
		t.Fatalf("a finish with the charged claim's token recorded %d outcomes", n)
	}
	if state, started, _, _ := e.state(t, "k"); state != "pending" || started != 1 {
		t.Fatalf("charged: %s, %d started", state, started)
	}

	second, err := schemasql.Queries.ClaimSuspects(ctx, st.Wrap(e.Pool), sqlc.ClaimSuspectsParams{Consumer: "ledger", Max: 10, LockKey: 1})
	if err != nil || len(second) != 1 || second[0].Token != first.Token+1 || second[0].AttemptsStarted != 1 {
		t.Fatalf("suspect claim: %v, %v", second, err)
	}
	if n := finish(e.Pool, sqlc.ClaimBatchRow(second[0])); n != 1 {
		t.Fatalf("finish recorded %d outcomes", n)
	}
	var state, owner string
	var token int64
	var started int
	var queued int64
	if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT state, coalesce(owner, ''), token, attempts_started,
		(SELECT count(*) FROM {schema}.inbox_queue) FROM {schema}.inbox`)).Scan(&state, &owner, &token, &started, &queued); err != nil {
		t.Fatal(err)
	}
	if state != "completed" || owner != "" || token != 2 || started != 2 || queued != 0 {
		t.Fatalf("finished: state %s, owner %q, token %d, %d started, %d queued", state, owner, token, started, queued)
	}
}
