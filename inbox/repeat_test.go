package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
)

// A key repeated within one ReceiveMany batch whose first copy conflicts with the stored row is
// compared with the stored row, not with that first copy: an altered redelivery sent twice is two
// Conflicts (it was a Conflict then a Duplicate reporting the stored row), and a copy equal to the
// stored payload is a Duplicate.
func TestReceiveManyRepeatOfConflict(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	stored := ledgertest.Message("k", `{"amount": 1}`)
	first, err := c.Receive(ctx, stored)
	if err != nil || first.Outcome != inbox.Inserted {
		t.Fatalf("first receive = %+v, %v", first, err)
	}
	altered := ledgertest.Message("k", `{"amount": 2}`)
	rs, err := c.ReceiveMany(ctx, []inbox.Message{altered, altered, ledgertest.Message("k", `{ "amount" : 1 }`)})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []inbox.Outcome{inbox.Conflict, inbox.Conflict, inbox.Duplicate} {
		r := rs[i]
		if r.Outcome != want || r.ID != first.ID || r.State != inbox.StatePending {
			t.Errorf("receipt %d = %+v, want %v of id %d, pending", i, r, want, first.ID)
		}
		if conflict := errors.Is(r.Err, inbox.ErrKeyConflict); conflict != (want == inbox.Conflict) {
			t.Errorf("receipt %d error = %v", i, r.Err)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'k'`); n != 1 {
		t.Fatalf("%d rows for k, want 1", n)
	}
}
