package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// TestHealth holds a snapshot open in another session, as a forgotten psql session would, and checks
// that Health names it (not an older one of another database) as the holder of the xmin horizon and that the queue rows deleted after it stay
// as dead row versions, even through a VACUUM.
func TestHealth(t *testing.T) {
	t.Parallel()
	db := testdb.NewInDatabase(t) // the snapshot held below holds back the horizon of its database only
	ic, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := client{ic, a}
	ctx := context.Background()

	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range h.Tables {
		names = append(names, tb.Table)
	}
	if want := []string{"idempotency_keys", "inbox", "inbox_dead", "inbox_queue", "inbox_rollup", "outbox", "outbox_queue"}; !slices.Equal(names, want) {
		t.Fatalf("tables %v, want %v", names, want)
	}
	if g := h.Generation; g == nil || g.Number != 0 || time.Since(g.BeganAt) > time.Hour {
		t.Fatalf("generation %+v, want 0, begun at the migration", g)
	}

	// An older snapshot in another database of the cluster holds back that database's cleanup only:
	// it is never the holder.
	elsewhere := testdb.HoldSnapshot(t, testdb.NewInDatabase(t).URL)
	snap := testdb.HoldSnapshot(t, db.URL)
	const n = 20
	var ks []string
	for i := range n {
		ks = append(ks, fmt.Sprintf("h-%d", i))
	}
	ids := ledgertest.Receive(t, c, ks...)
	if _, err := db.Pool.Exec(ctx, db.SQL(`DELETE FROM {schema}.inbox_queue WHERE id = ANY($1)`), ids); err != nil {
		t.Fatal(err)
	}
	queue := func(h admin.Health) admin.TableHealth {
		for _, tb := range h.Tables {
			if tb.Table == "inbox_queue" {
				return tb
			}
		}
		t.Fatalf("no inbox_queue in %+v", h.Tables)
		return admin.TableHealth{}
	}
	// Statistics are reported within a second or so, and the test's own pool connections may hold a
	// snapshot for a moment: wait until the held snapshot is the holder and the deletes are counted.
	ledgertest.WaitFor(t, "the held snapshot named as the holder, and the deleted queue rows counted dead", func() bool {
		h, err = c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Horizon.Holder != nil && h.Horizon.Holder.PID == elsewhere.PID {
			t.Fatalf("the holder is a session of another database: %+v", *h.Horizon.Holder)
		}
		return h.Horizon.Holder != nil && h.Horizon.Holder.PID == snap.PID && queue(h).DeadRows >= n
	})
	hd := h.Horizon.Holder
	if hd.ApplicationName != snap.ApplicationName || hd.State != "idle in transaction" || hd.DetailsHidden ||
		hd.XactStart.IsZero() || hd.QueryStart.Before(hd.XactStart) || hd.XminAge < 1 || hd.Role == "" ||
		hd.BackendType != "client backend" {
		t.Fatalf("holder %+v", *hd)
	}
	if want := time.Since(hd.XactStart) + time.Second; hd.Age < 0 || hd.Age > want {
		t.Fatalf("holder age %v, transaction began %v", hd.Age, hd.XactStart)
	}
	if h.Horizon.FrozenXidAge < hd.XminAge {
		t.Fatalf("frozen xid age %d below the holder's xmin age %d", h.Horizon.FrozenXidAge, hd.XminAge)
	}

	// VACUUM cannot remove row versions the snapshot may still see.
	if _, err := db.Pool.Exec(ctx, "VACUUM "+pgx.Identifier{db.Schema, "inbox_queue"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	h, err = c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q := queue(h); q.Vacuums < 1 || q.LastVacuum.IsZero() || q.DeadRows < n || q.Bytes <= 0 {
		t.Fatalf("inbox_queue after VACUUM under a held snapshot: %+v", q)
	}
}

// TestHealthJSON checks the JSON form: durations as seconds, unset times left out, and a round trip.
func TestHealthJSON(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	h := admin.Health{
		Tables: []admin.TableHealth{{Table: "inbox_queue", LiveRows: 3, DeadRows: 70_000, LastAutovacuum: start}},
		Horizon: admin.Horizon{
			Holder: &admin.XminHolder{PID: 42, ApplicationName: "psql", State: "idle in transaction",
				XactStart: start, QueryStart: start, XminAge: 1234, Age: 1500 * time.Millisecond},
			PreparedGID: "g", PreparedXminAge: 9, PreparedAge: 2 * time.Second, FrozenXidAge: 5000,
		},
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"age_seconds":1.5`, `"prepared_age_seconds":2`, `"dead_rows":70000`,
		`"xmin_age_xids":1234`, `"pid":42`, `"last_autovacuum":"2025-01-02T03:04:05Z"`, `"slot_xmin_age_xids":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `"last_vacuum"`) {
		t.Errorf("JSON has the unset last_vacuum:\n%s", b)
	}
	var back admin.Health
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Horizon.Holder == nil || *back.Horizon.Holder != *h.Horizon.Holder || back.Horizon.PreparedAge != h.Horizon.PreparedAge ||
		back.Horizon.FrozenXidAge != 5000 || !slices.Equal(back.Tables, h.Tables) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", back, h)
	}
}
