package worker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/txinboxtest/plantest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// The generic plans of the worker's statements (PostgreSQL's plan of a prepared statement from its
// sixth run on, made without the parameters' values) must do work proportional to the batch, not to
// its square: a statement that joined a batch's ids and tokens (unnest) to the queue rows inside a
// nested loop read all n of them again for each of the n rows, 40,000 rows and 20 µs of server CPU
// per message for a batch handler's batch of 200 (docs/design/generic-plans.md, "The batch's own
// rows: one probe each"). Each statement is run with EXPLAIN ANALYZE of its generic plan on a batch
// of n claimed messages, in a transaction rolled back, and no node may handle more than a few rows
// per message.
func TestWorkerStatementsGenericPlansAreLinear(t *testing.T) {
	t.Parallel()
	const n = 200
	db := testdb.New(t)
	ctx := context.Background()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A queue much longer than a batch, as when a backlog drains.
	for b := range 10 {
		msgs := make([]inbox.Message, 1000)
		for i := range msgs {
			msgs[i] = inbox.Message{Consumer: "plans", Key: fmt.Sprintf("k%05d", b*1000+i), Kind: "k", Payload: []byte(`{"amount":1}`)}
		}
		if _, err := c.ReceiveMany(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	// Statistics as autovacuum keeps them. (Before a partition's first ANALYZE, a generic plan of the
	// claim reads the inbox rows through the unique key by consumer alone, which is why the pool runs
	// it with a custom plan: TestClaimAndFinishIgnoreForcedGenericPlans.)
	for _, table := range []string{"inbox", "inbox_queue"} {
		if _, err := db.Pool.Exec(ctx, "ANALYZE "+pgx.Identifier{db.Schema, table}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	st := schemasql.New(db.Schema)
	// A batch in flight: the n first messages, listed in an inbox_batch row; and n suspects after them
	// (isolated, as after a crash of a batch of 2n).
	rows, err := schemasql.Queries.ClaimBatch(ctx, st.Wrap(db.Pool), sqlc.ClaimBatchParams{Consumer: "plans", Max: n})
	if err != nil || len(rows) != n {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	ids, keys, tokens := make([]int64, n), make([]string, n), make([]int64, n)
	outcomes, texts, delays, uncount := make([]string, n), make([]string, n), make([]float64, n), make([]int32, n)
	for i, r := range rows {
		ids[i], keys[i], tokens[i], outcomes[i] = r.ID, r.Key, r.Token, "completed"
	}
	record, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(db.Pool), sqlc.RecordBatchParams{Consumer: "plans", Xid: "1", Ids: ids, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox_queue SET isolate = $1, group_size = 2 * $1
		WHERE id IN (SELECT id FROM {schema}.inbox_queue WHERE id > $2 ORDER BY id LIMIT $1)`), n, ids[n-1]); err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	// Every statement that a batch runs in proportion to its size (QueueStats and StaleTables read
	// whole tables by design, for scrapes and checks).
	statements := map[string]func(db sqlc.DBTX){
		"ClaimBatch": func(db sqlc.DBTX) {
			_, _ = schemasql.Queries.ClaimBatch(ctx, db, sqlc.ClaimBatchParams{Consumer: "plans", Max: n})
		},
		"ClaimSuspects": func(db sqlc.DBTX) {
			_, _ = schemasql.Queries.ClaimSuspects(ctx, db, sqlc.ClaimSuspectsParams{Consumer: "plans", Max: n, LockKey: 1})
		},
		"RecordBatch": func(db sqlc.DBTX) {
			_, _ = schemasql.Queries.RecordBatch(ctx, db, sqlc.RecordBatchParams{Consumer: "plans", Xid: "2", Ids: ids, Owner: "test"})
		},
		"FinishBatch": func(db sqlc.DBTX) {
			_, _ = schemasql.Queries.FinishBatch(ctx, db, sqlc.FinishBatchParams{Consumer: "plans", Ids: ids, Keys: keys, Tokens: tokens,
				Outcomes: outcomes, Errors: texts, Results: texts, Delays: delays, Uncount: uncount, RetentionSeconds: 60,
				StartedAt: pgtype.Timestamptz{Valid: true}, Batch: record})
		},
		"SettleBatch": func(db sqlc.DBTX) {
			_, _ = schemasql.Queries.SettleBatch(ctx, db, sqlc.SettleBatchParams{Consumer: "plans", Batch: record, HeldIds: ids, HeldTokens: tokens})
		},
		"ChargeBatch": func(db sqlc.DBTX) { _, _ = schemasql.Queries.ChargeBatch(ctx, db, "plans", record) },
		"SnoozeBlocked": func(db sqlc.DBTX) {
			_, _ = schemasql.Queries.SnoozeBlocked(ctx, db, sqlc.SnoozeBlockedParams{Consumer: "plans", SnoozeSeconds: 1, Max: n})
		},
	}
	for name, run := range statements {
		sql, args := schemasql.Capture(run)
		plantest.CheckLinear(t, name, plantest.ExplainGeneric(t, conn, st.SQL(sql), args), 3*n)
	}
}
