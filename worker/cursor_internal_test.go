package worker

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/sqlc"
)

// The claim cursor's rules (claim.go, "The claim cursor"): a full claim moves it to its last row in
// claim order (run_at, then id), whatever order the rows came in; a claim that was not full sends the
// next claim to the head; so do cursorClaims claims from it and cursorLife since a claim from the
// head set it. A claim from the head starts the count and the clock again.
func TestClaimCursorRules(t *testing.T) {
	t.Parallel()
	at := func(s int) pgtype.Timestamptz {
		return pgtype.Timestamptz{Time: time.Unix(1_800_000_000+int64(s), 0), Valid: true}
	}
	rows := func(r ...sqlc.ClaimBatchRow) []sqlc.ClaimBatchRow { return r }
	row := func(s int, id int64) sqlc.ClaimBatchRow { return sqlc.ClaimBatchRow{RunAt: at(s), ID: id} }
	atHead := func(c *cursor) bool {
		t.Helper()
		after, id := c.from()
		if after.Valid != id.Valid {
			t.Fatalf("from: run_at %v and id %v must both be set or both NULL", after, id)
		}
		return !after.Valid
	}

	var c cursor
	if !atHead(&c) {
		t.Fatal("a new cursor must start at the head")
	}
	// Full: past its last row in claim order; the rows need not come in that order.
	c.after(rows(row(5, 9), row(7, 3), row(7, 2), row(6, 10)), 4)
	if after, id := c.from(); !after.Valid || !after.Time.Equal(at(7).Time) || id.Int64 != 3 {
		t.Fatalf("after a full claim: from (%v, %v), want (run_at+7s, 3)", after.Time, id)
	}
	// Not full: back to the head.
	c.after(rows(row(8, 11)), 4)
	if !atHead(&c) {
		t.Fatal("after a claim that was not full, the next claim must start at the head")
	}
	c.after(rows(), 4)
	if !atHead(&c) {
		t.Fatal("after an empty claim, the next claim must start at the head")
	}

	// cursorClaims claims from the cursor, then one from the head, which sets it again.
	c.after(rows(row(1, 1), row(1, 2)), 2) // a claim from the head
	for i := range cursorClaims {
		if atHead(&c) {
			t.Fatalf("claim %d after a full claim from the head started at the head", i+1)
		}
		c.after(rows(row(2+i, int64(10+2*i)), row(2+i, int64(11+2*i))), 2)
	}
	if !atHead(&c) {
		t.Fatalf("after %d claims from the cursor, the next must start at the head", cursorClaims)
	}
	c.after(rows(row(100, 1), row(100, 2)), 2)
	if atHead(&c) {
		t.Fatal("a full claim from the head must set the cursor again, its count started anew")
	}

	// cursorLife after the claim from the head that set it.
	c.after(rows(row(101, 1), row(101, 2)), 2)
	c.since = time.Now().Add(-cursorLife)
	if !atHead(&c) {
		t.Fatalf("a cursor set %v ago must send the claim to the head", cursorLife)
	}
}
