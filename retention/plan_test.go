package retention_test

import (
	"context"
	"strings"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/plantest"
)

// A generic plan of ReceiveBatch made while the current generation's partition looks empty (just
// truncated by a rotation, never analyzed) must still find each key by the unique key (consumer, key):
// one that joined the batch's keys by consumer alone read every row of the partition for every key,
// and receives slowed as the partition filled (docs/design/retention-layout.md, "The receive's plan
// after a rotation"). The generic plan is read with plantest.ExplainGeneric.
func TestReceivePlanProbesKeysAfterRotation(t *testing.T) {
	t.Parallel()
	_, db := newClient(t)
	store := db.Store()
	ctx := context.Background()
	rotate(t, store)
	rotate(t, store) // the current slot was truncated and has no statistics
	conn, rec := plantest.Connect(t, db.URL, "-- name: ReceiveBatch ")
	c, err := inbox.New(txinbox.Store{DB: conn, Schema: db.Schema}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []inbox.Message
	for _, k := range ledgertest.Keys("k", 20) {
		msgs = append(msgs, ledgertest.Message(k, `{"amount":1}`))
	}
	if _, err := c.ReceiveMany(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	sql, args := rec.Last()
	plan := plantest.ExplainGeneric(t, conn, sql, args)
	scans := 0
	for _, n := range plantest.Nodes(t, plan) {
		if !strings.HasPrefix(n.Relation, "inbox_s") {
			continue
		}
		scans++
		if !strings.Contains(n.IndexCond, "key =") {
			t.Errorf("%s on %s with index condition %q: not a probe of (consumer, key)\n%s", n.Type, n.Relation, n.IndexCond, plan)
			return
		}
	}
	if scans == 0 {
		t.Fatalf("no scan of the inbox partitions in the plan:\n%s", plan)
	}
}
