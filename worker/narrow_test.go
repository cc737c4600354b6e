package worker_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
)

// A claim's state lives in its queue row until the finish (migration 00004). The claim leaves the
// inbox row alone; a released claim keeps its token but is no longer claimed, so a late finish with
// that token records nothing; the next claim counts on from the queue row, and its finish writes the
// inbox row once with the claim's token and attempts.
func TestClaimStateInQueueRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "k")
	ctx := context.Background()
	db := store.New(e.Schema).Wrap(e.Pool)
	inboxRow := func() string {
		t.Helper()
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT row(state, owner, token, attempts_started, attempts_failed,
			lease_until, started_at, completed_at)::text FROM {schema}.inbox`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	claim := func() sqlc.ClaimBatchRow {
		t.Helper()
		rows, err := store.Queries.ClaimBatch(ctx, db, sqlc.ClaimBatchParams{Consumer: "ledger", Max: 10, SnoozeSeconds: 30,
			LeaseSeconds: 60, Owner: pgtype.Text{String: "w1", Valid: true}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %v, %v", rows, err)
		}
		return rows[0]
	}
	finish := func(r sqlc.ClaimBatchRow) int64 {
		t.Helper()
		n, err := store.Queries.FinishBatch(ctx, db, sqlc.FinishBatchParams{Consumer: "ledger", RetentionSeconds: 3600,
			Ids: []int64{r.ID}, Keys: []string{r.Key}, Tokens: []int64{r.Token}, Outcomes: []string{"completed"}, Errors: []string{""},
			Results: []string{""}, Delays: []float64{0}, Uncount: []int32{0}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	before := inboxRow()
	first := claim()
	if first.Token != 1 || first.AttemptsStarted != 1 {
		t.Fatalf("first claim: token %d, attempt %d", first.Token, first.AttemptsStarted)
	}
	if got := inboxRow(); got != before {
		t.Fatalf("the claim wrote the inbox row:\n%s\n%s", before, got)
	}
	if state, started, _, _ := e.state(t, "k"); state != "processing" || started != 1 {
		t.Fatalf("claimed: %s, %d started", state, started)
	}
	if n, err := store.Queries.ReleaseClaims(ctx, db, sqlc.ReleaseClaimsParams{Consumer: "ledger", Ids: []int64{first.ID}, Tokens: []int64{first.Token}}); err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if n := finish(first); n != 0 {
		t.Fatalf("a finish after the release recorded %d outcomes", n)
	}
	if got := inboxRow(); got != before {
		t.Fatalf("release and fenced finish wrote the inbox row:\n%s\n%s", before, got)
	}
	if state, started, _, _ := e.state(t, "k"); state != "pending" || started != 0 {
		t.Fatalf("released: %s, %d started", state, started)
	}

	second := claim()
	if second.Token != 2 || second.AttemptsStarted != 1 {
		t.Fatalf("second claim: token %d, attempt %d", second.Token, second.AttemptsStarted)
	}
	if n := finish(second); n != 1 {
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
	if state != "completed" || owner != "" || token != 2 || started != 1 || queued != 0 {
		t.Fatalf("finished: state %s, owner %q, token %d, %d started, %d queued", state, owner, token, started, queued)
	}
}
