package admin_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Overview counts each consumer's pending, retrying, claimed and dead messages exactly, and lists the
// per-minute counts of the window only.
func TestOverview(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "a", "b", "c", "d", "e")
	if _, err := c.Receive(ctx, inbox.Message{Consumer: "audit", Key: "x", Kind: "Audit", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, db.SQL(sql), args...); err != nil {
			t.Fatal(err)
		}
	}
	// b retrying (claimed once and failed), c claimed, d and e dead.
	exec(`UPDATE {schema}.inbox_queue SET token = 1, run_at = now() - interval '1 hour' WHERE id = $1`, ids[1])
	exec(`INSERT INTO {schema}.inbox_batch (consumer, xid, ids, owner) VALUES ('ledger', '1', ARRAY[$1::bigint], 'w1')`, ids[2])
	kill(t, db, "boom", time.Now(), ids[3], ids[4])
	exec(`INSERT INTO {schema}.inbox_rollup (consumer, minute, completed, failed, dead)
		VALUES ('ledger', date_trunc('minute', now()) - interval '2 minutes', 7, 3, 2),
		       ('ledger', date_trunc('minute', now()) - interval '3 hours', 100, 100, 100)`)
	o, err := c.Overview(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if o.Truncated || len(o.Consumers) != 2 || o.Consumers[0].Consumer != "audit" || o.Consumers[1].Consumer != "ledger" {
		t.Fatalf("overview: %+v", o)
	}
	if a := o.Consumers[0]; a.Pending != 1 || a.Retrying+a.Claimed+a.Dead != 0 || len(a.Minutes) != 0 {
		t.Errorf("audit: %+v", a)
	}
	l := o.Consumers[1]
	if l.Pending != 1 || l.Retrying != 1 || l.Claimed != 1 || l.Dead != 2 || l.OldestDue < 59*time.Minute || l.OldestDue > 2*time.Hour {
		t.Errorf("ledger: %+v", l)
	}
	if len(l.Minutes) != 1 || l.Minutes[0].Completed != 7 || l.Minutes[0].Failed != 3 || l.Minutes[0].Dead != 2 {
		t.Errorf("ledger's minutes: %+v, want the one of the last hour", l.Minutes)
	}
	if o, err := c.Overview(ctx, 4*60); err != nil || len(o.Consumers[1].Minutes) != 2 {
		t.Errorf("a 4-hour window: %+v, %v", o, err)
	}
	for _, n := range []int{0, 2*24*60 + 1} {
		if _, err := c.Overview(ctx, n); !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("Overview(%d): %v, want an *ArgumentError", n, err)
		}
	}
}

// FindMessage finds a message by consumer and key; an unknown key is a *NotFoundError naming them.
// CountUnclaimed and UnclaimedIDs see the queued messages no worker holds.
func TestFindMessageAndUnclaimed(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "k1", "k2", "k3")
	m, err := c.FindMessage(ctx, "ledger", "k2")
	if err != nil || m.ID != ids[1] || m.Key != "k2" || m.State != inbox.StatePending {
		t.Fatalf("FindMessage: %+v, %v", m, err)
	}
	_, err = c.FindMessage(ctx, "ledger", "nope")
	var nf *admin.NotFoundError
	if !errors.Is(err, admin.ErrNotFound) || !errors.As(err, &nf) || nf.Consumer != "ledger" || nf.Key != "nope" || nf.ID != 0 {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`INSERT INTO {schema}.inbox_batch (consumer, xid, ids, owner) VALUES ('ledger', '1', ARRAY[$1::bigint], 'w1')`), ids[1]); err != nil {
		t.Fatal(err)
	}
	n, err := c.CountUnclaimed(ctx, "ledger")
	if err != nil || n.Matching != 2 || n.MaxID != ids[2] {
		t.Fatalf("CountUnclaimed: %+v, %v", n, err)
	}
	late := ledgertest.Receive(t, c, "k4")
	got, err := c.UnclaimedIDs(ctx, "ledger", n.MaxID, 10)
	if err != nil || !slices.Equal(got, []int64{ids[0], ids[2]}) {
		t.Fatalf("UnclaimedIDs up to the count: %v, %v (received later: %d)", got, err, late[0])
	}
}

// DiscardOlder reports its progress after each statement (Config.Progress): the rows deleted so far
// over every consumer, never decreasing, ending at the total, and the share of the walk, rising to 1.
func TestDiscardOlderProgress(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	var got []admin.Progress
	a, err := admin.New(db.Store(), admin.Config{Progress: func(p admin.Progress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	old := ledgertest.Receive(t, c, ledgertest.Keys("old", 2500)...) // more than two statements
	ledgertest.Complete(t, db, time.Hour, old...)
	r, err := c.Receive(context.Background(), inbox.Message{Consumer: "audit", Key: "a", Kind: "Audit", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.Complete(t, db, time.Hour, r.ID)
	d, err := a.DiscardOlder(context.Background(), admin.OlderFilter{OlderThan: 0})
	if n := d.Discarded; err != nil || n != 2501 {
		t.Fatalf("DiscardOlder: %d, %v", n, err)
	}
	if len(got) < 4 {
		t.Fatalf("progress reported %d times, want once per statement (at least 4): %+v", len(got), got)
	}
	for i, p := range got {
		if p.Share < 0 || p.Share > 1 || (i > 0 && (p.Done < got[i-1].Done || p.Share < got[i-1].Share)) {
			t.Fatalf("progress %d: %+v after %+v", i, p, got[max(i-1, 0)])
		}
	}
	if last := got[len(got)-1]; last.Done != 2501 || last.Share != 1 {
		t.Fatalf("last progress %+v, want 2501 done (both consumers'), share 1", last)
	}
	if got[0].Share != 0.5 || got[0].Done != 1 {
		t.Fatalf("first progress %+v: audit's walk (the first of two consumers: half the walk) deletes its 1", got[0])
	}
}
