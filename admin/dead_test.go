package admin_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
)

// seqOf returns the seq of an inbox dead letter: its cursor, a decimal number.
func seqOf(t *testing.T, l txinbox.DeadLetter) int64 {
	t.Helper()
	n, err := strconv.ParseInt(l.Cursor, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("cursor of an inbox dead letter %q: not a seq", l.Cursor)
	}
	return n
}

func letterIDs(ls []txinbox.DeadLetter) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return out
}

// deadSet kills, one statement each and in this order (so that they die in this order), ledger's
// messages a, b and c and audit's a: a and b of "Insufficient funds" on day, c of a timeout a day
// later, audit's of "insufficient FUNDS" two days later. d is completed and e pending.
func deadSet(t *testing.T) (c client, ids []int64, audit int64, day time.Time) {
	t.Helper()
	c, db := newClient(t)
	ids = ledgertest.Receive(t, c, "a", "b", "c", "d", "e")
	r, err := c.Receive(context.Background(), inbox.Message{Consumer: "audit", Key: "a", Kind: "Audit", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	day = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	kill(t, db, "Insufficient funds", day, ids[0])
	kill(t, db, "Insufficient funds", day, ids[1])
	kill(t, db, "timeout: deadline exceeded", day.Add(24*time.Hour), ids[2])
	kill(t, db, "insufficient FUNDS", day.Add(48*time.Hour), r.ID)
	ledgertest.Complete(t, db, time.Hour, ids[3]) // not dead
	// ids[4] stays pending
	return c, ids, r.ID, day
}

// ListDead lists the dead letters newest first (the order they died in, reversed), pages by Seq,
// and matches the error text as a substring in any case.
func TestListDeadFilters(t *testing.T) {
	t.Parallel()
	c, ids, audit, day := deadSet(t)
	ctx := context.Background()
	all, err := c.ListDead(ctx, admin.DeadFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{audit, ids[2], ids[1], ids[0]}; !slices.Equal(letterIDs(all), want) {
		t.Fatalf("all: %v, want %v (newest first)", letterIDs(all), want)
	}
	seq := map[int64]string{} // each letter's cursor: its seq
	for i, l := range all {
		seq[l.ID] = l.Cursor
		if i > 0 && seqOf(t, l) >= seqOf(t, all[i-1]) {
			t.Fatalf("seqs not decreasing: %+v", all)
		}
	}
	cases := []struct {
		name string
		f    admin.DeadFilter
		want []int64
	}{
		{"consumer", admin.DeadFilter{Consumer: "ledger"}, []int64{ids[2], ids[1], ids[0]}},
		{"kind", admin.DeadFilter{Kind: "Audit"}, []int64{audit}},
		{"error", admin.DeadFilter{ErrorContains: "funds"}, []int64{audit, ids[1], ids[0]}},
		{"error in another case", admin.DeadFilter{ErrorContains: "FUNDS"}, []int64{audit, ids[1], ids[0]}},
		{"error, mixed case", admin.DeadFilter{ErrorContains: "iNsUfFiCiEnT f"}, []int64{audit, ids[1], ids[0]}},
		{"error is literal", admin.DeadFilter{ErrorContains: "%"}, []int64{}},
		{"error is literal _", admin.DeadFilter{ErrorContains: "timeout_"}, []int64{}},
		{"since", admin.DeadFilter{Since: day.Add(time.Hour)}, []int64{audit, ids[2]}},
		{"until", admin.DeadFilter{Until: day.Add(time.Hour)}, []int64{ids[1], ids[0]}},
		{"window", admin.DeadFilter{Since: day.Add(time.Hour), Until: day.Add(25 * time.Hour)}, []int64{ids[2]}},
		{"page 1", admin.DeadFilter{Limit: 2}, []int64{audit, ids[2]}},
		{"page 2", admin.DeadFilter{Limit: 2, Before: seq[ids[2]]}, []int64{ids[1], ids[0]}},
		{"page 3", admin.DeadFilter{Limit: 2, Before: seq[ids[0]]}, []int64{}},
		{"combined", admin.DeadFilter{Consumer: "ledger", ErrorContains: "FUNDS", Before: seq[ids[1]]}, []int64{ids[0]}},
	}
	for _, tc := range cases {
		got, err := c.ListDead(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(letterIDs(got), tc.want) {
			t.Errorf("%s: ids %v, want %v", tc.name, letterIDs(got), tc.want)
		}
		n, err := c.CountDead(ctx, admin.DeadFilter{Consumer: tc.f.Consumer, Kind: tc.f.Kind, ErrorContains: tc.f.ErrorContains,
			Since: tc.f.Since, Until: tc.f.Until, Before: tc.f.Before})
		if tc.f.Limit == 0 && (err != nil || n.Matching != int64(len(tc.want))) {
			t.Errorf("%s: CountDead %+v, %v; want %d", tc.name, n, err, len(tc.want))
		}
	}
	l := all[0]
	if l.ID != audit || l.Consumer != "audit" || l.Key != "a" || l.Kind != "Audit" || l.LastError != "insufficient FUNDS" ||
		!l.DiedAt.Equal(day.Add(48*time.Hour)) || l.AttemptsStarted != 3 || l.AttemptsFailed != 3 || l.Undecodable {
		t.Errorf("listed dead letter: %+v", l)
	}

	for _, f := range []admin.DeadFilter{{Limit: -1}, {Limit: limits.DeadListLimit + 1}, {Before: "-1"}, {Before: "1:2"},
		{Since: day, Until: day}, {ErrorContains: "a\x00"}, {Kind: "\xff"},
		{Topic: "orders"}, {Key: "k1"}, {View: admin.View(7)}} { // the outbox's fields; no View
		var ae *txinbox.ArgumentError
		if _, err := c.ListDead(ctx, f); !errors.Is(err, txinbox.ErrInvalidArgument) || !errors.As(err, &ae) {
			t.Errorf("%+v: err = %v, want an *ArgumentError", f, err)
		}
		if _, err := c.CountDead(ctx, f); f.Limit == 0 && !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("CountDead %+v: err = %v, want an *ArgumentError", f, err)
		}
	}
}

// CountDead's Before bounds DeadIDs to the letters counted: a message that dies after the count is
// not among them. DeadIDs lists ids in increasing order, at most max; DeadAmong says which ids are
// dead now.
func TestCountDeadBoundsDeadIDs(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "a", "b", "c", "d")
	kill(t, db, "timeout", time.Now(), ids[2])
	kill(t, db, "Timeout", time.Now(), ids[0])
	kill(t, db, "refused", time.Now(), ids[1])
	f := admin.DeadFilter{ErrorContains: "TIMEOUT"}
	n, err := c.CountDead(ctx, f)
	if err != nil || n.Matching != 2 {
		t.Fatalf("CountDead: %+v, %v; want 2 matching", n, err)
	}
	kill(t, db, "timeout", time.Now(), ids[3]) // dies after the count
	f.Before = n.Before
	got, err := c.DeadIDs(ctx, f, 100)
	if want := []int64{ids[0], ids[2]}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("DeadIDs bounded by the count: %v, %v; want %v", got, err, want)
	}
	if got, err := c.DeadIDs(ctx, admin.DeadFilter{ErrorContains: "timeout"}, 2); err != nil || !slices.Equal(got, []int64{ids[0], ids[2]}) {
		t.Fatalf("DeadIDs, max 2: %v, %v", got, err)
	}
	if _, err := c.DeadIDs(ctx, f, 0); !errors.Is(err, txinbox.ErrInvalidArgument) {
		t.Fatalf("DeadIDs max 0: %v, want an *ArgumentError", err)
	}
	if got, err := c.DeadAmong(ctx, admin.Inbox, ids[3], ids[1], 999999, ids[0]); err != nil || !slices.Equal(got, []int64{ids[0], ids[1], ids[3]}) {
		t.Fatalf("DeadAmong: %v, %v", got, err)
	}
	if got, err := c.DeadAmong(ctx, admin.Inbox); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("DeadAmong(): %v, %v; want an empty slice", got, err)
	}
	// A message that is replayed and dies again is a new letter: it sorts first.
	if _, err := c.ReplayDead(ctx, admin.Inbox, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`DELETE FROM {schema}.inbox_queue WHERE id = $1`), ids[0]); err != nil {
		t.Fatal(err)
	}
	kill(t, db, "timeout again", time.Now(), ids[0])
	if l, err := c.ListDead(ctx, admin.DeadFilter{Limit: 1}); err != nil || len(l) != 1 || l[0].ID != ids[0] || l[0].LastError != "timeout again" {
		t.Fatalf("newest letter: %+v, %v; want %d", l, err, ids[0])
	}
}

// DeadShare never exceeds 1, even when the estimate of live rows is far below the dead ones.
func TestDeadShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		live, dead int64
		want       float64
	}{
		{0, 0, 0}, {100, 0, 0}, {0, 100, 1}, {75, 25, 0.25}, {4, 100, 100.0 / 104}, {-5, 10, 1},
	} {
		got := admin.TableHealth{LiveRows: tc.live, DeadRows: tc.dead}.DeadShare()
		if got != tc.want || got < 0 || got > 1 {
			t.Errorf("live %d, dead %d: DeadShare %v, want %v", tc.live, tc.dead, got, tc.want)
		}
	}
}

// noDB is a txinbox.DB that fails the test on every statement.
type noDB struct{ t *testing.T }

var errNoDB = errors.New("no statement may run")

func (d noDB) Begin(context.Context) (pgx.Tx, error) { d.t.Error("Begin called"); return nil, errNoDB }
func (d noDB) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	d.t.Errorf("Exec called: %s", sql)
	return pgconn.CommandTag{}, errNoDB
}
func (d noDB) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	d.t.Errorf("Query called: %s", sql)
	return nil, errNoDB
}
func (d noDB) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	d.t.Errorf("QueryRow called: %s", sql)
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return errNoDB }

// Every dead-letter call of an Admin, and Pause and Resume (each method taking a View or a
// DeadFilter, found by reflection), refuses a View that is neither Inbox nor Outbox with an *ArgumentError, before any statement.
func TestEveryDeadCallChecksTheView(t *testing.T) {
	t.Parallel()
	a, err := admin.New(txinbox.Store{DB: noDB{t}}, admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctxT, viewT, filterT := reflect.TypeFor[context.Context](), reflect.TypeFor[admin.View](), reflect.TypeFor[admin.DeadFilter]()
	var checked []string
	at := reflect.TypeOf(a)
	for i := range at.NumMethod() {
		m := at.Method(i)
		args, takes := []reflect.Value{reflect.ValueOf(a)}, false
		for j := 1; j < m.Type.NumIn(); j++ {
			in := m.Type.In(j)
			switch {
			case in == ctxT:
				args = append(args, reflect.ValueOf(context.Background()))
			case in == viewT:
				args, takes = append(args, reflect.ValueOf(admin.View(7))), true
			case in == filterT:
				args, takes = append(args, reflect.ValueOf(admin.DeadFilter{View: 7})), true
			case m.Type.IsVariadic() && j == m.Type.NumIn()-1:
				args = append(args, reflect.ValueOf(int64(1)).Convert(in.Elem()))
			case in.Kind() == reflect.Int:
				args = append(args, reflect.ValueOf(10))
			default:
				args = append(args, reflect.Zero(in))
			}
		}
		if !takes {
			continue
		}
		checked = append(checked, m.Name)
		out := m.Func.Call(args)
		err, _ := out[len(out)-1].Interface().(error)
		var ae *txinbox.ArgumentError
		if !errors.Is(err, txinbox.ErrInvalidArgument) || !errors.As(err, &ae) || !strings.EqualFold(ae.Name, "view") {
			t.Errorf("%s with View 7: err = %v, want an *ArgumentError naming the view", m.Name, err)
		}
	}
	slices.Sort(checked)
	if want := []string{"CountDead", "DeadAmong", "DeadIDs", "DiscardDead", "ListDead", "Pause", "ReplayDead", "Resume"}; !slices.Equal(checked, want) {
		t.Errorf("dead-letter calls found: %v, want %v", checked, want)
	}
}
