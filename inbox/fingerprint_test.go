package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// kindMessage is a message of consumer ledger under kind.
func kindMessage(key, kind, payload string) inbox.Message {
	m := ledgertest.Message(key, payload)
	m.Kind = kind
	return m
}

// otherKinds are pairs of messages of one key that differ in their kind: the same payload under
// another kind, and a kind and payload whose texts, run together, are those of the first.
var otherKinds = []struct{ stored, other inbox.Message }{
	{kindMessage("k", "OrderPaid", `{"amount":1}`), kindMessage("k", "OrderRefunded", `{"amount":1}`)},
	{kindMessage("s", "K1", `2`), kindMessage("s", "K", `12`)},
}

// The fingerprint a redelivery is compared by covers the kind, kept apart from the payload: a key
// received again with the same payload under another kind (or with a kind and payload that run
// together as the stored ones do) is a Conflict with the stored message, which stays as it was,
// whether it was stored by an earlier call or is an earlier occurrence in the same batch.
func TestReceiveKindIsFingerprinted(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	for _, p := range otherKinds {
		key := p.stored.Key
		first, err := c.Receive(ctx, p.stored)
		if err != nil || first.Outcome != inbox.Inserted {
			t.Fatalf("%s: first receive = %+v, %v", key, first, err)
		}
		r, err := c.Receive(ctx, p.other)
		wantConflict(t, key+": Receive under another kind", r, err, key, first.ID)
		rs, err := c.ReceiveMany(ctx, []inbox.Message{p.other, p.stored})
		if err != nil {
			t.Fatal(err)
		}
		wantConflict(t, key+": ReceiveMany under another kind", rs[0], rs[0].Err, key, first.ID)
		wantDuplicate(t, key+": ReceiveMany under the stored kind", rs[1], first.ID)
		r, err = c.Receive(ctx, p.stored)
		if err != nil {
			t.Fatal(err)
		}
		wantDuplicate(t, key+": Receive under the stored kind", r, first.ID)
		if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = $1 AND kind = $2`, key, p.stored.Kind); n != 1 {
			t.Errorf("%s: %d rows of kind %s, want the stored one, unchanged", key, n, p.stored.Kind)
		}
		wantStoredOnce(t, db, key, string(p.stored.Payload))

		// Within one batch, a repeat of a new key is compared with its first occurrence.
		fresh, again := p.stored, p.other
		fresh.Key, again.Key = "batch-"+key, "batch-"+key
		rs, err = c.ReceiveMany(ctx, []inbox.Message{fresh, again})
		if err != nil {
			t.Fatal(err)
		}
		if rs[0].Outcome != inbox.Inserted {
			t.Fatalf("%s: first occurrence in the batch = %+v, want Inserted", fresh.Key, rs[0])
		}
		wantConflict(t, fresh.Key+": repeat under another kind in the batch", rs[1], rs[1].Err, fresh.Key, rs[0].ID)
	}
}

// With the seen-key cache warm (an exact redelivery is answered from it), the same key and payload
// under another kind (or a kind and payload that run together as the cached ones do) is still a
// Conflict: the cache's fingerprint covers the kind, kept apart from the payload, so the message
// misses the cache (a mismatch) and the database decides.
func TestSeenKindIsFingerprinted(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	c, o := seenClient(t, db, newLRU(t), time.Hour)
	ctx := context.Background()
	for _, p := range otherKinds {
		key := p.stored.Key
		first, err := c.Receive(ctx, p.stored)
		if err != nil || first.Outcome != inbox.Inserted {
			t.Fatalf("%s: first receive = %+v, %v", key, first, err)
		}
		if d, err := c.Receive(ctx, p.stored); err != nil || d.Outcome != inbox.Duplicate || !d.Cached || d.ID != first.ID {
			t.Fatalf("%s: exact redelivery = %+v, %v, want a cached Duplicate of %d", key, d, err, first.ID)
		}
		mismatches := o.result("mismatch")
		r, err := c.Receive(ctx, p.other)
		wantConflict(t, key+": Receive under another kind", r, err, key, first.ID)
		rs, err := c.ReceiveMany(ctx, []inbox.Message{p.other})
		if err != nil {
			t.Fatal(err)
		}
		wantConflict(t, key+": ReceiveMany under another kind", rs[0], rs[0].Err, key, first.ID)
		if got := o.result("mismatch") - mismatches; got != 2 {
			t.Errorf("%s: %d cache mismatches, want 2 (one per receive under another kind)", key, got)
		}
		wantStoredOnce(t, db, key, string(p.stored.Payload))
	}
}
