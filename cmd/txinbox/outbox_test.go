package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// outboxEvent is an event of topic and key whose fate (outboxtest.ByHeaders) is refuse or fail with
// the text given (both empty: acknowledged).
func outboxEvent(topic, key, refuse, fail string) outbox.Message {
	h := map[string]string{}
	if refuse != "" {
		h["refuse"] = refuse
	}
	if fail != "" {
		h["fail"] = fail
	}
	return outbox.Message{Topic: topic, Key: key, Payload: []byte(`{"n":1}`), Headers: h}
}

// seedOutbox publishes events and brings them to their states with real relays: d1 and d2 of topic
// orders refused ("Insufficient funds") together, then d3 of topic audit refused ("timeout talking to
// the broker"): newest first they are d3, d2, d1. s1 of orders is sent, r1 of orders retrying, p1 of
// later pending (its NotBefore an hour ahead).
func seedOutbox(t *testing.T) (*testdb.DB, map[string]int64) {
	t.Helper()
	db := testdb.New(t)
	ids := map[string]int64{}
	round := func(names []string, msgs ...outbox.Message) {
		t.Helper()
		got := outboxtest.Publish(t, db, msgs...)
		for i, n := range names {
			ids[n] = got[i]
		}
		outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	}
	round([]string{"d1", "d2"}, outboxEvent("orders", "k1", "Insufficient funds", ""), outboxEvent("orders", "k2", "Insufficient funds", ""))
	round([]string{"d3"}, outboxEvent("audit", "k1", "timeout talking to the broker", ""))
	round([]string{"s1", "r1", "p1"}, outboxEvent("orders", "k3", "", ""), outboxEvent("orders", "k4", "", "broker down"),
		outbox.Message{Topic: "later", Payload: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)})
	return db, ids
}

func outboxIDs(evs []txinbox.DeadLetter) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// outbox stats prints admin.Admin.OutboxStats: a table, or its JSON.
func TestOutboxStatsCommand(t *testing.T) {
	t.Parallel()
	db, _ := seedOutbox(t)
	st := decode[[]map[string]any](t, cli(t, db.URL, "--schema", db.Schema, "outbox", "stats", "--json"))
	if len(st) != 3 || st[0]["topic"] != "audit" || st[1]["topic"] != "later" || st[2]["topic"] != "orders" {
		t.Fatalf("outbox stats --json: %v", st)
	}
	o := st[2]
	if o["pending"] != 0.0 || o["retrying"] != 1.0 || o["claimed"] != 0.0 || o["sent"] != 1.0 || o["dead"] != 2.0 || st[1]["pending"] != 1.0 {
		t.Fatalf("orders: %v", o)
	}
	if lag, ok := o["oldest_unsent_seconds"].(float64); !ok || lag <= 0 || lag > 600 {
		t.Fatalf("orders: oldest_unsent_seconds %v, want the retrying event's age in seconds", o["oldest_unsent_seconds"])
	}
	r := cli(t, db.URL, "--schema", db.Schema, "outbox", "stats")
	r.want(t, 0, "TOPIC", "")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[3], "orders") ||
		!strings.Contains(lines[0], "LAG") || strings.Fields(lines[3])[5] != "2" {
		t.Fatalf("outbox stats:\n%s", r.stdout)
	}
	empty := testdb.New(t)
	cli(t, empty.URL, "--schema", empty.Schema, "outbox", "stats").want(t, 0, "no outbox events in schema "+empty.Schema, "")
	if got := cli(t, empty.URL, "--schema", empty.Schema, "outbox", "stats", "--json"); strings.TrimSpace(got.stdout) != "[]" {
		t.Fatalf("outbox stats --json of nothing: %q", got.stdout)
	}
}

// outbox dead list, show, replay and discard: the inbox's dead-letter commands' conventions, exit
// statuses included, on the outbox's dead events.
func TestOutboxDeadCommands(t *testing.T) {
	t.Parallel()
	db, ids := seedOutbox(t)
	s, url := db.Schema, db.URL

	r := cli(t, url, "outbox", "dead", "list", "--schema", s)
	r.want(t, 0, "LAST ERROR", "")
	if strings.Count(r.stdout, "\n") != 4 || !strings.Contains(r.stdout, "permanent: Insufficient funds") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	list := decode[[]txinbox.DeadLetter](t, cli(t, url, "outbox", "dead", "list", "--schema", s, "--json"))
	if got, want := outboxIDs(list), []int64{ids["d3"], ids["d2"], ids["d1"]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("list --json: %v, want %v (newest first)", got, want)
	}
	list = decode[[]txinbox.DeadLetter](t, cli(t, url, "outbox", "dead", "list", "--schema", s, "--json", "--topic", "orders", "--error", "FUNDS", "--key", "k1"))
	if len(list) != 1 || list[0].ID != ids["d1"] || list[0].LastError != "permanent: Insufficient funds" || list[0].DiedAt.IsZero() || list[0].Cursor == "" {
		t.Fatalf("filtered list: %+v", list)
	}
	list = decode[[]txinbox.DeadLetter](t, cli(t, url, "outbox", "dead", "list", "--schema", s, "--json", "--limit", "1"))
	if len(list) != 1 || list[0].ID != ids["d3"] {
		t.Fatalf("limited list: %+v, want d3 (the newest)", list)
	}
	cli(t, url, "outbox", "dead", "list", "--schema", s, "--limit", "1").want(t, 0, "LAST ERROR", "--before "+list[0].Cursor)
	next := decode[[]txinbox.DeadLetter](t, cli(t, url, "outbox", "dead", "list", "--schema", s, "--json", "--limit", "1", "--before", list[0].Cursor))
	if len(next) != 1 || next[0].ID != ids["d2"] {
		t.Fatalf("next page: %+v, want d2", next)
	}
	cli(t, url, "outbox", "dead", "list", "--schema", s, "--before", "nope").want(t, 1, "", "not a cursor")
	cli(t, url, "outbox", "dead", "list", "--schema", s, "--since", "yesterday").want(t, 2, "", "--since")
	if l := decode[[]txinbox.DeadLetter](t, cli(t, url, "outbox", "dead", "list", "--schema", s, "--json", "--until", "1h")); len(l) != 0 {
		t.Fatalf("--until 1h: %+v, want none (they died just now)", l)
	}

	// show, in both forms; flags after the id work too.
	e := decode[admin.OutboxEvent](t, cli(t, url, "outbox", "dead", "show", fmt.Sprint(ids["d3"]), "--schema", s, "--json"))
	if e.Topic != "audit" || e.Key != "k1" || e.State != "dead" || e.LastError != "permanent: timeout talking to the broker" ||
		e.Headers["refuse"] == "" || strings.Join(strings.Fields(string(e.Payload)), "") != `{"n":1}` {
		t.Fatalf("show: %+v", e)
	}
	if e.Kind != "audit" || e.ContentType != "application/json" { // the defaults
		t.Fatalf("show --json: kind %q, content type %q; want audit, application/json", e.Kind, e.ContentType)
	}
	r = cli(t, url, "--schema", s, "outbox", "dead", "show", fmt.Sprint(ids["d3"]))
	r.want(t, 0, "last error:", "")
	f := shownFields(r.stdout)
	for name, want := range map[string]string{"event id": e.EventID, "state": "dead", "kind": "audit", "content type": "application/json"} {
		if f[name] != want {
			t.Fatalf("show: %s %q, want %q:\n%s", name, f[name], want, r.stdout)
		}
	}
	if f["died"] == "" || !strings.Contains(r.stdout, "payload:") {
		t.Fatalf("show lacks the time of death or the payload:\n%s", r.stdout)
	}
	// By event id (the UUID a consumer sees), in either case: the same event, in both forms.
	for _, eventID := range []string{e.EventID, strings.ToUpper(e.EventID)} {
		if byEventID := cli(t, url, "--schema", s, "outbox", "dead", "show", eventID); byEventID.stdout != r.stdout || byEventID.code != 0 {
			t.Fatalf("show %s: exit %d\n%s\nwant show %d's\n%s", eventID, byEventID.code, byEventID.stdout, ids["d3"], r.stdout)
		}
	}
	if j := cli(t, url, "--schema", s, "--json", "outbox", "dead", "show", e.EventID); j.stdout != cli(t, url, "--schema", s, "--json", "outbox", "dead", "show", fmt.Sprint(ids["d3"])).stdout {
		t.Fatalf("show --json by event id differs from show --json by id:\n%s", j.stdout)
	}
	cli(t, url, "--schema", s, "outbox", "dead", "show", fmt.Sprint(ids["s1"])).want(t, 0, "sent:", "")
	cli(t, url, "--schema", s, "outbox", "dead", "show", "999999").want(t, 1, "", "outbox event 999999 not found")
	cli(t, url, "--schema", s, "outbox", "dead", "show", notStoredEventID).want(t, 1, "", "no outbox event has event id "+notStoredEventID)
	cli(t, url, "--schema", s, "outbox", "dead", "show", "abc").want(t, 2, "", "not an event id")

	// replay one by id; a non-dead id fails the command but the dead one is replayed.
	rep := decode[map[string][]int64](t, cli(t, url, "--schema", s, "--json", "outbox", "dead", "replay", fmt.Sprint(ids["d1"])))
	if len(rep["replayed"]) != 1 || rep["replayed"][0] != ids["d1"] || len(rep["skipped"]) != 0 {
		t.Fatalf("replay: %v", rep)
	}
	cli(t, url, "--schema", s, "outbox", "dead", "replay", fmt.Sprint(ids["d1"])).
		want(t, 1, "skipped 1 (not dead, or not found): "+fmt.Sprint(ids["d1"]), "not replayed")
	if n := db.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE id = $1`, ids["d1"]); n != 1 {
		t.Fatal("replayed event not queued")
	}
	cli(t, url, "--schema", s, "outbox", "dead", "replay").want(t, 2, "", "needs event ids")
	cli(t, url, "--schema", s, "outbox", "dead", "replay", "--topic", "audit", "1").want(t, 2, "", "filters only apply with --all")

	// discard: --all needs --topic or --yes; --dry-run changes nothing.
	before := snapshot(t, db)
	cli(t, url, "--schema", s, "outbox", "dead", "discard", "--all").want(t, 2, "", "--yes")
	cli(t, url, "--schema", s, "outbox", "dead", "discard", "--all", "--dry-run").
		want(t, 0, fmt.Sprintf("dry run: would discard 2 dead outbox event(s): %d, %d\nnothing was changed", ids["d2"], ids["d3"]), "")
	cli(t, url, "--schema", s, "outbox", "dead", "discard", "--dry-run", fmt.Sprint(ids["d2"]), fmt.Sprint(ids["s1"])).
		want(t, 1, "would skip 1 (not dead, or not found): "+fmt.Sprint(ids["s1"]), "would not be discarded")
	if after := snapshot(t, db); after != before {
		t.Fatalf("a dry run changed rows: %s -> %s", before, after)
	}
	cli(t, url, "--schema", s, "outbox", "dead", "discard", "--all", "--topic", "audit").want(t, 0, "discarded 1 dead outbox event(s): "+fmt.Sprint(ids["d3"]), "")
	cli(t, url, "--schema", s, "outbox", "dead", "discard", fmt.Sprint(ids["s1"])).want(t, 1, "skipped 1", "not discarded")
	left := decode[[]txinbox.DeadLetter](t, cli(t, url, "outbox", "dead", "list", "--schema", s, "--json"))
	if len(left) != 1 || left[0].ID != ids["d2"] {
		t.Fatalf("dead events left: %+v", left)
	}
	// replay --all puts the rest back; --yes confirms a discard of every topic.
	cli(t, url, "--schema", s, "outbox", "dead", "replay", "--all").want(t, 0, "replayed 1 dead outbox event(s): "+fmt.Sprint(ids["d2"]), "")
	cli(t, url, "--schema", s, "outbox", "dead", "discard", "--all", "--yes").want(t, 0, "discarded 0 dead outbox event(s)", "")
	if n := db.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE state = 'dead'`); n != 0 {
		t.Fatalf("%d dead events left", n)
	}
}

// Bad input to the outbox commands exits 2 and writes nothing.
func TestOutboxUsage(t *testing.T) {
	t.Parallel()
	db, ids := seedOutbox(t)
	before := snapshot(t, db)
	d1 := fmt.Sprint(ids["d1"])
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"outbox"}, "needs a sub-command: stats, inflight, dead"},
		{[]string{"outbox", "dead"}, "needs a sub-command: list, show, replay, discard"},
		{[]string{"outbox", "dead", "purge"}, `unknown sub-command "outbox dead purge"`},
		{[]string{"outbox", "sideways"}, `unknown sub-command "outbox sideways"`},
		{[]string{"outbox", "stats", "x"}, "unexpected arguments"},
		{[]string{"outbox", "dead", "list", "--topic", "a\x01b"}, "--topic:"},
		{[]string{"outbox", "dead", "list", "--key", "a\xffb"}, "--key:"},
		{[]string{"outbox", "dead", "list", "--error", "a\xffb"}, "--error:"},
		{[]string{"outbox", "dead", "list", "--limit", "0"}, "--limit must be between"},
		{[]string{"outbox", "dead", "list", "--until", "next week"}, "--until:"},
		{[]string{"outbox", "dead", "show"}, "exactly one event id"},
		{[]string{"outbox", "dead", "show", d1, d1}, "exactly one event id"},
		{[]string{"outbox", "dead", "replay", "0"}, "not an event id"},
		{[]string{"outbox", "dead", "show", "5f0c6a523c1e4b7a9d2e8a1b2c3d4e5f"}, "not an event id"},
		{[]string{"outbox", "dead", "show", d1 + "," + d1}, "exactly one event id"},
		{[]string{"outbox", "dead", "replay", "{" + notStoredEventID + "}"}, "not an event id"},
		{[]string{"outbox", "dead", "discard", notStoredEventID + ",x"}, "not an event id"},
		{[]string{"outbox", "dead", "replay", d1, "--all"}, "either ids or --all"},
		{[]string{"outbox", "dead", "replay", "--all", "--topic", "a\x01"}, "--topic:"},
		{[]string{"outbox", "dead", "discard", "--all", "--error", "funds"}, "--yes"},
		{[]string{"outbox", "dead", "discard", "--yes", d1}, "--yes only applies with --all"},
		{[]string{"outbox", "dead", "discard", "--bogus"}, "flag provided but not defined"},
	} {
		r := cli(t, db.URL, append([]string{"--schema", db.Schema}, c.args...)...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, c.stderr) || !strings.Contains(r.stderr, "--help") {
			t.Errorf("txinbox %q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stdout, r.stderr, c.stderr)
		}
		if after := snapshot(t, db); after != before {
			t.Fatalf("txinbox %q wrote something: %s -> %s", c.args, before, after)
		}
	}
	for _, args := range [][]string{{"outbox", "--help"}, {"outbox", "dead", "--help"}, {"help", "outbox", "dead", "list"},
		{"outbox", "stats", "--help"}, {"outbox", "dead", "list", "--help"}, {"outbox", "dead", "show", "--help"},
		{"outbox", "dead", "replay", "--help"}, {"outbox", "dead", "discard", "--help"}} {
		r := cli(t, "", args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: txinbox") || r.stderr != "" {
			t.Errorf("txinbox %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

// On a terminal, outbox dead replay and discard with --all draw their progress on stderr and erase
// it before the result; with --json they print nothing but the result.
func TestOutboxProgressOnTerminal(t *testing.T) {
	t.Parallel()
	db, _ := seedOutbox(t)
	s := db.Schema
	r := runIn(t, db.URL, true, "--schema", s, "outbox", "dead", "discard", "--all", "--topic", "orders")
	r.want(t, 0, "discarded 2 dead outbox event(s)", "outbox dead discard: ")
	lines, erased := progressLines(r.stderr)
	if !erased || len(lines) < 2 || lines[0] != "outbox dead discard: 0s elapsed" || !strings.HasPrefix(lines[len(lines)-1], "outbox dead discard: 2 of 2 dead events, ") {
		t.Fatalf("progress of outbox dead discard: %q (erased: %v)", lines, erased)
	}
	r = runIn(t, db.URL, true, "--schema", s, "--json", "outbox", "dead", "replay", "--all")
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "{") {
		t.Fatalf("outbox dead replay --all --json on a terminal: exit %d\nstdout:\n%s\nstderr (want empty):\n%q", r.code, r.stdout, r.stderr)
	}
}

var outboxOlderRE = regexp.MustCompile(`<a id="older" href="/outbox/dead\?([^"]*)">`)

// consoleOutboxPages returns the ids of every page of the console's dead outbox events for the
// filter q, in the order shown (following its "Older" link), and the count of matching events it
// states.
func consoleOutboxPages(t *testing.T, srv string, q url.Values) (pages [][]int64, matching int64) {
	t.Helper()
	query := q.Encode()
	for {
		resp, err := http.Get(srv + "/outbox/dead?" + query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body := string(b)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /outbox/dead?%s: %d\n%s", query, resp.StatusCode, body)
		}
		var page []int64
		for _, m := range rowIDRE.FindAllStringSubmatch(body, -1) {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			page = append(page, id)
		}
		if m := matchRE.FindStringSubmatch(body); m != nil {
			matching, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if len(page) > 0 || len(pages) == 0 {
			pages = append(pages, page)
		}
		m := outboxOlderRE.FindStringSubmatch(body)
		if m == nil {
			return pages, matching
		}
		query = html.UnescapeString(m[1])
	}
}

// cliOutboxPages returns the ids of every page of `txinbox outbox dead list --json` for the filter
// args, a page of the console's size at a time, following --before.
func cliOutboxPages(t *testing.T, db *testdb.DB, args ...string) [][]int64 {
	t.Helper()
	var pages [][]int64
	before := ""
	for {
		a := append([]string{"--schema", db.Schema, "outbox", "dead", "list", "--json", "--limit", fmt.Sprint(pageSize)}, args...)
		if before != "" {
			a = append(a, "--before", before)
		}
		ls := decode[[]txinbox.DeadLetter](t, cli(t, db.URL, a...))
		if page := outboxIDs(ls); len(page) > 0 || len(pages) == 0 {
			pages = append(pages, page)
		}
		if len(ls) < pageSize {
			return pages
		}
		before = ls[len(ls)-1].Cursor
	}
}

// The CLI's outbox dead list and the console's dead outbox events are one answer: for the same
// filter (topic, key, error text in another case than stored, a time window, combinations) they list
// the same events in the same order (newest first, which is not id order here), page by page, and
// the console's count matches.
func TestOutboxDeadListMatchesConsole(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	// 130 events of topics billing and mail, keys a and b (and none), refused with three error texts.
	errs := []string{"Card DECLINED by issuer", "card declined: insufficient funds", "SMTP timeout"}
	msgs := make([]outbox.Message, 130)
	for i := range msgs {
		topic, key := "billing", ""
		if i%3 == 0 {
			topic = "mail"
		}
		switch i % 4 {
		case 0:
			key = "a"
		case 1:
			key = "b"
		}
		msgs[i] = outbox.Message{Topic: topic, Key: key, Payload: []byte(`{}`), Headers: map[string]string{"refuse": errs[i%3]}}
	}
	ids := outboxtest.Publish(t, db, msgs...)
	outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
	if n := db.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE state = 'dead'`); n != 130 {
		t.Fatalf("%d dead events, want 130", n)
	}
	// Their times of death in an order that is not their ids' (a step of 47 through 130), the first
	// half a day earlier.
	b := &pgx.Batch{}
	for n := range 130 {
		b.Queue(db.SQL(`UPDATE {schema}.outbox SET finished_at = now() - make_interval(secs => 200 - $2) - CASE WHEN $2 < 65 THEN interval '1 day' ELSE interval '0' END
			WHERE id = $1`), ids[(n*47)%130], n)
	}
	if err := db.Pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	st := db.Store()
	st.Logger = slog.New(slog.DiscardHandler)
	h, err := console.New(st, console.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, f := range []struct {
		console url.Values
		cli     []string
		want    int64 // matching events
	}{
		{url.Values{}, nil, 130},
		{url.Values{"topic": {"mail"}}, []string{"--topic", "mail"}, 44},
		{url.Values{"key": {"a"}}, []string{"--key", "a"}, 33},
		{url.Values{"error": {"declined"}}, []string{"--error", "DECLINED"}, 87},
		{url.Values{"error": {"smtp TIMEOUT"}}, []string{"--error", "Smtp Timeout"}, 43},
		{url.Values{"topic": {"billing"}, "key": {"b"}, "error": {"CARD"}}, []string{"--topic", "billing", "--key", "b", "--error", "card"}, -1},
		{url.Values{"error": {"nothing like it"}}, []string{"--error", "nothing like it"}, 0},
	} {
		web, matching := consoleOutboxPages(t, srv.URL, f.console)
		term := cliOutboxPages(t, db, f.cli...)
		if !slices.EqualFunc(web, term, slices.Equal[[]int64]) {
			t.Errorf("filter %v / %q: the console lists\n%v\nthe CLI lists\n%v", f.console, f.cli, web, term)
		}
		var all []int64
		for _, p := range web {
			all = append(all, p...)
		}
		if f.want >= 0 && (matching != f.want || int64(len(all)) != f.want) {
			t.Errorf("filter %v: %d listed, %d matching; want %d", f.console, len(all), matching, f.want)
		}
		if len(all) > pageSize && (slices.IsSorted(all) || slices.IsSortedFunc(all, func(x, y int64) int { return int(y - x) })) {
			t.Errorf("filter %v: listed in id order; want the order they died in", f.console)
		}
	}
	// A window of time: those that died in the last 12 hours (the second half).
	since := decode[[]txinbox.DeadLetter](t, cli(t, db.URL, "--schema", db.Schema, "outbox", "dead", "list", "--json", "--limit", "1000", "--since", "12h"))
	web, _ := consoleOutboxPages(t, srv.URL, url.Values{"since": {since[len(since)-1].DiedAt.UTC().Format("2006-01-02T15:04:05.999999999Z07:00")}})
	var all []int64
	for _, p := range web {
		all = append(all, p...)
	}
	if got := outboxIDs(since); len(got) != 65 || !slices.Equal(all, got) {
		t.Errorf("since: the CLI lists %d %v, the console %d %v", len(got), got, len(all), all)
	}
}

// notStoredEventID is an event id no test publishes (the outbox's event ids are UUIDs of version 7;
// this one is of version 4).
const notStoredEventID = "5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5f"

// shownFields returns the "name: value" lines of a show command's text output, by name.
func shownFields(stdout string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(stdout) {
		name, value, ok := strings.Cut(line, ":")
		if ok && !strings.HasPrefix(line, " ") {
			out[name] = strings.TrimSpace(value)
		}
	}
	return out
}

// outboxSnapshot is a checksum of every row of db's outbox tables.
func outboxSnapshot(t *testing.T, db *testdb.DB) string {
	t.Helper()
	var s string
	if err := db.Pool.QueryRow(context.Background(), db.SQL(`SELECT
		(SELECT count(*) || ':' || coalesce(md5(string_agg(m::text, '|' ORDER BY m.id)), '') FROM {schema}.outbox m) || '/' ||
		(SELECT count(*) || ':' || coalesce(md5(string_agg(q::text, '|' ORDER BY q.id)), '') FROM {schema}.outbox_queue q)`)).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// outboxIDCommands returns the commands of the command table that take outbox events' ids: the
// outbox's commands whose arguments name an ID.
func outboxIDCommands() []*command {
	var out []*command
	for _, c := range commands {
		if strings.HasPrefix(c.name, "outbox ") && strings.Contains(c.args, "ID") {
			out = append(out, c)
		}
	}
	return out
}

// Every command that takes an outbox event's id (every outbox command of the table whose arguments
// name an ID: show, replay, discard, and discard's dry run) takes its event id as well, the UUID a
// consumer sees: given the event id of a dead event it does exactly what it does given its id (the
// same output, the same rows after it, each run on a schema seeded alike), exit 0; given the event
// id of no stored event, alone or with one that is, it exits 1 naming it and changes nothing; given
// a string that is neither, it exits 2 and changes nothing.
func TestEveryOutboxIDCommandTakesTheEventID(t *testing.T) {
	t.Parallel()
	cmds := outboxIDCommands()
	if len(cmds) < 3 {
		t.Fatalf("the command table has %d outbox commands taking ids, want show, replay and discard at least", len(cmds))
	}
	for _, c := range cmds {
		variants := [][]string{nil}
		fs := newFlagSet(c.name)
		if c.flags != nil {
			c.flags(fs)
		}
		if fs.Lookup("dry-run") != nil {
			variants = append(variants, []string{"--dry-run"})
		}
		for _, extra := range variants {
			name := strings.Join(append(strings.Fields(c.name), extra...), "_")
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				run := func(db *testdb.DB, json bool, ids ...string) result {
					args := append([]string{"--schema", db.Schema}, strings.Fields(c.name)...)
					if json {
						args = append(args, "--json")
					}
					return cli(t, db.URL, append(append(args, extra...), ids...)...)
				}
				byID, idsA := seedOutbox(t)
				byEventID, idsB := seedOutbox(t)
				if fmt.Sprint(idsA) != fmt.Sprint(idsB) {
					t.Fatalf("two seeds gave the events different ids: %v, %v", idsA, idsB)
				}
				d1 := fmt.Sprint(idsA["d1"])
				var eventID string
				if err := byEventID.Pool.QueryRow(context.Background(), byEventID.SQL(`SELECT event_id::text FROM {schema}.outbox WHERE id = $1`), idsB["d1"]).Scan(&eventID); err != nil {
					t.Fatal(err)
				}
				// Wrong event ids first: nothing changes.
				before := outboxSnapshot(t, byEventID)
				run(byEventID, false, notStoredEventID).want(t, 1, "", "no outbox event has event id "+notStoredEventID)
				run(byEventID, true, notStoredEventID).want(t, 1, "", "no outbox event has event id "+notStoredEventID)
				if !strings.HasSuffix(c.name, " show") {
					run(byEventID, false, eventID, notStoredEventID).want(t, 1, "", "no outbox event has event id "+notStoredEventID)
				}
				r := run(byEventID, false, eventID[:35]+"x")
				if r.code != 2 || !strings.Contains(r.stderr, "not an event id") {
					t.Fatalf("txinbox %s with a malformed event id: exit %d, stderr:\n%s\nwant exit 2", c.name, r.code, r.stderr)
				}
				if after := outboxSnapshot(t, byEventID); after != before {
					t.Fatalf("txinbox %s with a wrong event id changed rows: %s -> %s", c.name, before, after)
				}
				// The event id of a dead event: as its id.
				want := run(byID, true, d1)
				got := run(byEventID, true, eventID)
				if want.code != 0 || got.code != 0 {
					t.Fatalf("txinbox %s: exit %d by id, %d by event id\nstderr: %s\n%s", c.name, want.code, got.code, want.stderr, got.stderr)
				}
				if strings.HasSuffix(c.name, " show") { // the events differ in event id and times: compare the one event
					e, ed := decode[admin.OutboxEvent](t, want), decode[admin.OutboxEvent](t, got)
					if ed.ID != idsB["d1"] || ed.EventID != eventID || ed.Topic != e.Topic || ed.Key != e.Key || ed.State != e.State {
						t.Fatalf("txinbox %s %s: %+v\nwant the event of %s's: %+v", c.name, eventID, ed, d1, e)
					}
				} else if got.stdout != want.stdout {
					t.Fatalf("txinbox %s %s:\n%s\nwant as %s gives:\n%s", c.name, eventID, got.stdout, d1, want.stdout)
				}
				states := `SELECT string_agg(id || ' ' || state, ', ' ORDER BY id) FROM {schema}.outbox`
				var a, b string
				for _, x := range []struct {
					db *testdb.DB
					to *string
				}{{byID, &a}, {byEventID, &b}} {
					if err := x.db.Pool.QueryRow(context.Background(), x.db.SQL(states)).Scan(x.to); err != nil {
						t.Fatal(err)
					}
				}
				if a != b {
					t.Fatalf("txinbox %s: by id the events became %s, by event id %s", c.name, a, b)
				}
			})
		}
	}
}

// The JSON of outbox dead list and outbox dead show has the keys of the Go types' JSON
// (txinbox.DeadLetter, admin.OutboxEvent), the kind and content type among them.
func TestOutboxJSONMatchesGoTypes(t *testing.T) {
	t.Parallel()
	db, ids := seedOutbox(t)
	c, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := func(v any) []string {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(m))
	}
	list, err := c.ListDead(ctx, admin.DeadFilter{View: admin.Outbox})
	if err != nil || len(list) == 0 {
		t.Fatalf("ListDead: %v, %v", list, err)
	}
	e, err := c.GetOutboxEvent(ctx, ids["d1"])
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		args []string
		goV  any
	}{
		{[]string{"outbox", "dead", "list"}, list[0]},
		{[]string{"outbox", "dead", "show", fmt.Sprint(ids["d1"])}, e},
		{[]string{"outbox", "dead", "show", e.EventID}, e},
	} {
		out := decode[any](t, cli(t, db.URL, append([]string{"--schema", db.Schema, "--json"}, x.args...)...))
		if arr, ok := out.([]any); ok {
			out = arr[0]
		}
		got, want := keys(out), keys(x.goV)
		if !slices.Equal(got, want) {
			t.Errorf("txinbox %q --json has the keys %v; the Go type's JSON %v", x.args, got, want)
		}
		for _, k := range []string{"kind", "content_type"} {
			if !slices.Contains(got, k) {
				t.Errorf("txinbox %q --json lacks %s", x.args, k)
			}
		}
	}
}
