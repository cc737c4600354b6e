package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/plantest"
)

var errRollback = errors.New("rolled back")

// The generic plans of the relay's statements (PostgreSQL's plan of a prepared statement from its
// sixth run on, made without the parameters' values) do work in proportion to the batch, not to the
// queue: a relay claims and records a batch of n events whatever the backlog. The claim once checked
// "no other event of its key is claimed" with a hashed subquery, which read the whole queue (a
// sequential scan of outbox_queue) at every claim that met a keyed event: most of the claim's time
// on a backlog of keyed events. Each statement is run with EXPLAIN ANALYZE of its generic plan, on a
// queue of 10,000 events (keyed and not) of which other relays hold 3n, in a transaction rolled
// back, and no node may handle more than a few rows per event of the batch. (The relay runs the
// claim with a custom plan, TestClaimRunsWithACustomPlan; the hashed subquery was in both.)
func TestRelayStatementsGenericPlansAreLinear(t *testing.T) {
	t.Parallel()
	const n = 100
	e := newEnv(t)
	ctx := context.Background()
	for b := range 10 {
		msgs := make([]outbox.Message, 1000)
		for i := range msgs {
			msgs[i] = msg("t", "", b*1000+i)
			if i%2 == 1 {
				msgs[i].Key = fmt.Sprintf("k%04d", (b*1000+i)%1000)
			}
		}
		e.publish(t, msgs...)
	}
	for _, table := range []string{"outbox", "outbox_queue"} {
		if _, err := e.Pool.Exec(ctx, "ANALYZE "+pgx.Identifier{e.Schema, table}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	st := schemasql.New(e.Schema)
	claim := func(owner string) sqlc.OutboxClaimParams {
		return sqlc.OutboxClaimParams{Max: n, SnoozeSeconds: 30, LeaseSeconds: 3600, Owner: pgtype.Text{String: owner, Valid: true}}
	}
	// Other relays' claims in flight.
	var held []sqlc.OutboxClaimRow
	for range 3 {
		rows, err := schemasql.Queries.OutboxClaim(ctx, st.Wrap(e.Pool), claim("other"))
		if err != nil || len(rows) != n {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		held = append(held, rows...)
	}
	fin := sqlc.OutboxFinishParams{}
	var keys []string
	for _, r := range held[:n] {
		fin.Ids, fin.Tokens = append(fin.Ids, r.ID), append(fin.Tokens, r.Token)
		fin.Outcomes, fin.Errors = append(fin.Outcomes, "sent"), append(fin.Errors, "")
		fin.Delays, fin.Uncount = append(fin.Delays, 0), append(fin.Uncount, 0)
		if r.Key != "" {
			keys = append(keys, r.Key)
		}
	}
	// A record of claims no longer held (each token is the one before the claim's, which the outbox
	// rows still hold): nothing is recorded, and every event is looked up in the outbox, as after a
	// claim whose commit answer was lost.
	stale := fin
	stale.Tokens = make([]int64, n)
	for i, r := range held[:n] {
		stale.Tokens[i] = r.Token - 1
	}

	if err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		rows, err := schemasql.Queries.OutboxFinish(ctx, st.Wrap(tx), stale)
		if err == nil && (len(rows) != n || slices.ContainsFunc(rows, func(r sqlc.OutboxFinishRow) bool { return !r.Earlier })) {
			err = fmt.Errorf("%d rows, want %d, each recorded earlier", len(rows), n)
		}
		if err == nil {
			err = errRollback
		}
		return err
	}); !errors.Is(err, errRollback) {
		t.Fatalf("OutboxFinish of claims no longer held: %v", err)
	}

	conn, err := pgx.Connect(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	statements := map[string]func(db sqlc.DBTX){
		"OutboxClaim":                           func(db sqlc.DBTX) { _, _ = schemasql.Queries.OutboxClaim(ctx, db, claim("me")) },
		"OutboxFinish":                          func(db sqlc.DBTX) { _, _ = schemasql.Queries.OutboxFinish(ctx, db, fin) },
		"OutboxFinish of claims no longer held": func(db sqlc.DBTX) { _, _ = schemasql.Queries.OutboxFinish(ctx, db, stale) },
		"OutboxReadyNext":                       func(db sqlc.DBTX) { _ = schemasql.Queries.OutboxReadyNext(ctx, db, keys) },
	}
	for name, run := range statements {
		sql, args := schemasql.Capture(run)
		plantest.CheckLinear(t, name, plantest.ExplainGeneric(t, conn, st.SQL(sql), args), 3*n)
	}
}

// The claim runs with a custom plan whatever the server's plan_cache_mode (OutboxClaimLock sets it
// for the claim's transaction): its generic plan, which cannot see the batch size, compiled itself
// with JIT at every run on a large queue, and one made while the queue was nearly empty reads the
// whole queue for each event once a backlog comes. Here the relay's connection prefers generic plans
// (plan_cache_mode = force_generic_plan), and after a drain of a claim per event its prepared claim
// has never run with one.
func TestClaimRunsWithACustomPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for i := range 8 {
		e.publish(t, msg("t", fmt.Sprintf("k%d", i%3), i))
	}
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // the relay's one runner claims and records on it; read its prepared statements after
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r := relayOn(t, txinbox.Store{DB: pool, Schema: e.Schema}, newRecorder(t, nil), func(c *outbox.RelayConfig) {
		c.BatchSize, c.Concurrency = 1, 1
		outbox.NoListen(c)
	})
	run(t, r)
	waitFor(t, "every event sent", func() bool { return e.count(t, "sent") == 8 })
	stop(t, r)
	var generic, custom int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0)::bigint, coalesce(sum(custom_plans), 0)::bigint
		FROM pg_prepared_statements WHERE statement LIKE '-- name: OutboxClaim :many%'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if generic != 0 || custom < 8 {
		t.Fatalf("the claim ran with %d generic and %d custom plans, want only custom ones (at least 8)", generic, custom)
	}
}
