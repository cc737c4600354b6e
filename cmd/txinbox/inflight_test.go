package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// seedInFlight is seed with two more queued messages of ledger: r1 retrying (its batch charged as a
// crash, with that attempt in its history) and q1 pending.
func seedInFlight(t *testing.T) (*testdb.DB, map[string]int64) {
	t.Helper()
	db, ids := seed(t)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"r1", "q1"} {
		r, err := c.Receive(ctx, inbox.Message{Consumer: "ledger", Key: k, Kind: "OrderPaid", Payload: []byte(`{"amount":5}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids[k] = r.ID
	}
	st := schemasql.New(db.Schema)
	rec, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(db.Pool), sqlc.RecordBatchParams{Consumer: "ledger", Xid: "3", Ids: []int64{ids["r1"]}, Owner: "host-a:42"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemasql.Queries.ChargeBatch(ctx, st.Wrap(db.Pool), "ledger", rec); err != nil {
		t.Fatal(err)
	}
	return db, ids
}

// inflight list prints admin.Admin.ListInFlight: the table, or its JSON, by consumer and state, page
// by page; dead show prints a message's attempt history.
func TestInflightList(t *testing.T) {
	t.Parallel()
	db, ids := seedInFlight(t)
	s := []string{"--schema", db.Schema}
	list := func(args ...string) []admin.InFlight {
		t.Helper()
		r := cli(t, db.URL, append(append(s, "inflight", "list", "--json"), args...)...)
		if r.code != 0 {
			t.Fatalf("inflight list %v: exit %d, stderr %s", args, r.code, r.stderr)
		}
		return decode[[]admin.InFlight](t, r)
	}
	idsOf := func(l []admin.InFlight) []int64 {
		out := []int64{}
		for _, x := range l {
			out = append(out, x.ID)
		}
		return out
	}
	all := list()
	if want := []int64{ids["q1"], ids["r1"], ids["p1"]}; !slices.Equal(idsOf(all), want) {
		t.Fatalf("inflight list --json: %v, want %v", idsOf(all), want)
	}
	if all[1].State != "retrying" || all[1].Consumer != "ledger" || all[0].State != "pending" || all[1].Cursor == "" {
		t.Fatalf("inflight list --json: %+v", all)
	}
	if got := idsOf(list("--state", "retrying")); !slices.Equal(got, []int64{ids["r1"]}) {
		t.Fatalf("--state retrying: %v", got)
	}
	if got := idsOf(list("--consumer", "audit")); len(got) != 0 {
		t.Fatalf("--consumer audit: %v, want none (its message is dead)", got)
	}
	// Page by page: the cursor of the last one listed, and a hint on stderr when the page is full.
	r := cli(t, db.URL, append(s, "inflight", "list", "--limit", "2")...)
	r.want(t, 0, "retrying", "more may follow: add --before "+all[1].Cursor)
	if !strings.Contains(r.stdout, "CURSOR") || !strings.Contains(r.stdout, "STATE") {
		t.Fatalf("inflight list table:\n%s", r.stdout)
	}
	if got := idsOf(list("--limit", "2", "--before", all[1].Cursor)); !slices.Equal(got, []int64{ids["p1"]}) {
		t.Fatalf("second page: %v", got)
	}
	cli(t, db.URL, append(s, "inflight", "list", "--consumer", "nobody")...).want(t, 0, "no queued messages", "")

	// The attempt history of the retrying message.
	cli(t, db.URL, append(s, "dead", "show", fmt.Sprint(ids["r1"]))...).want(t, 0, "crashed  by host-a:42", "")
	show := decode[inbox.StoredMessage](t, cli(t, db.URL, append(s, "--json", "dead", "show", fmt.Sprint(ids["r1"]))...))
	if len(show.History) != 1 || show.History[0].Reason != "crashed" || show.History[0].Owner != "host-a:42" || show.History[0].Number != 1 {
		t.Fatalf("dead show --json history: %+v", show.History)
	}

	// Usage errors: exit 2, before connecting.
	for _, args := range [][]string{
		{"inflight", "list", "--state", "dead"}, {"inflight", "list", "--consumer", `a"b`}, {"inflight", "list", "--limit", "0"},
		{"inflight", "list", "--before", "x"}, {"inflight", "list", "extra"}, {"inflight", "list", "--topic", "t"},
		{"outbox", "inflight", "list", "--consumer", "ledger"}, {"outbox", "inflight", "list", "--state", "sent"},
	} {
		if r := cli(t, "", append(s, args...)...); r.code != 2 || !strings.Contains(r.stderr, "--help") {
			t.Errorf("txinbox %v: exit %d, stderr:\n%s\nwant exit 2", args, r.code, r.stderr)
		}
	}
}

// outbox inflight list lists the outbox's queued events alike; outbox dead show prints an event's
// attempt history.
func TestOutboxInflightList(t *testing.T) {
	t.Parallel()
	db, ids := seedOutbox(t) // r1 retrying (failed once: broker down), p1 pending (its NotBefore ahead)
	s := []string{"--schema", db.Schema}
	l := decode[[]admin.InFlight](t, cli(t, db.URL, append(s, "outbox", "inflight", "list", "--json")...))
	if len(l) != 2 || l[0].ID != ids["p1"] || l[0].State != "pending" || l[1].ID != ids["r1"] || l[1].State != "retrying" ||
		l[1].Topic != "orders" || l[1].LastError != "broker down" {
		t.Fatalf("outbox inflight list --json: %+v", l)
	}
	l = decode[[]admin.InFlight](t, cli(t, db.URL, append(s, "outbox", "inflight", "list", "--json", "--topic", "orders", "--state", "retrying")...))
	if len(l) != 1 || l[0].ID != ids["r1"] {
		t.Fatalf("--topic orders --state retrying: %+v", l)
	}
	cli(t, db.URL, append(s, "outbox", "inflight", "list", "--state", "processing")...).want(t, 0, "no queued events", "")
	cli(t, db.URL, append(s, "outbox", "dead", "show", fmt.Sprint(ids["r1"]))...).want(t, 0, "failed attempts", "")
	ev := decode[admin.OutboxEvent](t, cli(t, db.URL, append(s, "--json", "outbox", "dead", "show", fmt.Sprint(ids["r1"]))...))
	if len(ev.History) != 1 || ev.History[0].Reason != "error" || ev.History[0].Error != "broker down" {
		t.Fatalf("outbox dead show --json history: %+v", ev.History)
	}
}

// Every command of the table answers --help (exit 0, its usage on stdout); every list command (its
// name ends in "list") prints a JSON array with --json on a schema with nothing in it, and refuses a
// --limit out of bounds with exit 2. (TestEveryCommandJSONAndUsage checks --json and usage errors
// of every command.)
func TestEveryCommandHelpAndEveryListJSON(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	lists := 0
	for _, c := range commands {
		r := cli(t, "", append(strings.Fields(c.name), "--help")...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: txinbox "+c.name) {
			t.Errorf("txinbox %s --help: exit %d\n%s%s", c.name, r.code, r.stdout, r.stderr)
		}
		if !strings.HasSuffix(c.name, " list") {
			continue
		}
		lists++
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		if fs.Lookup("limit") == nil {
			t.Errorf("txinbox %s has no --limit", c.name)
		}
		args := append([]string{"--schema", db.Schema, "--json"}, strings.Fields(c.name)...)
		r = cli(t, db.URL, args...)
		if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("txinbox %s --json on an empty schema: exit %d, stdout %q, stderr %s", c.name, r.code, r.stdout, r.stderr)
		}
		if r := cli(t, db.URL, append(args, "--limit", "1001")...); r.code != 2 {
			t.Errorf("txinbox %s --limit 1001: exit %d, want 2", c.name, r.code)
		}
	}
	if lists < 4 {
		t.Fatalf("%d list commands in the table, want dead, outbox dead, inflight and outbox inflight at least", lists)
	}
}
