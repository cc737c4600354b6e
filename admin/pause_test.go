package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Pause, ListPaused and Resume round trip over both views: a pause is recorded once with who, when
// and why (a second Pause changes nothing and says so), listed consumers first, and ended by Resume
// (a second Resume says it was not paused). Bad arguments are *ArgumentErrors and write nothing.
func TestPauseResumeListPaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now().Add(-time.Minute)
	for _, c := range []struct {
		v          admin.View
		name, by   string
		reason     string
		wantPaused bool
	}{
		{admin.Outbox, "orders.created", "bob", "", true},
		{admin.Inbox, "ledger", "alice", "ledger API down", true},
		{admin.Inbox, "ledger", "carol", "again", false},
	} {
		if ok, err := a.Pause(ctx, c.v, c.name, c.by, c.reason); err != nil || ok != c.wantPaused {
			t.Fatalf("Pause(%v, %s, %s) = %v, %v; want %v", c.v, c.name, c.by, ok, err, c.wantPaused)
		}
	}
	for _, bad := range []struct{ name, by, reason string }{{"", "x", ""}, {"bad name", "x", ""}, {"ok", "", ""}, {"ok", "x", "bell\a"}} {
		_, err := a.Pause(ctx, admin.Inbox, bad.name, bad.by, bad.reason)
		var ae *txinbox.ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("Pause(%q, %q, %q) = %v, want an *ArgumentError", bad.name, bad.by, bad.reason, err)
		}
	}
	ps, err := a.ListPaused(ctx)
	if err != nil || len(ps) != 2 {
		t.Fatalf("ListPaused = %+v, %v", ps, err)
	}
	if p := ps[0]; p.View != admin.Inbox || p.Name != "ledger" || p.By != "alice" || p.Reason != "ledger API down" || p.At.Before(begin) {
		t.Errorf("ListPaused[0] = %+v", p)
	}
	if p := ps[1]; p.View != admin.Outbox || p.Name != "orders.created" || p.By != "bob" || p.Reason != "" {
		t.Errorf("ListPaused[1] = %+v", p)
	}
	for _, c := range []struct {
		v    admin.View
		name string
		want bool
	}{{admin.Inbox, "ledger", true}, {admin.Inbox, "ledger", false}, {admin.Outbox, "orders.created", true}, {admin.Outbox, "nope", false}} {
		if ok, err := a.Resume(ctx, c.v, c.name); err != nil || ok != c.want {
			t.Errorf("Resume(%v, %s) = %v, %v; want %v", c.v, c.name, ok, err, c.want)
		}
	}
	if ps, err := a.ListPaused(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("ListPaused after resuming = %+v, %v", ps, err)
	}
}
