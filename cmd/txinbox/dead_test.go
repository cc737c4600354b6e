package main

import (
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// dead show labels a dead message's time as its death, and a completed message's as its completion.
func TestDeadShowLabelsDeath(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	r := cli(t, db.URL, "--schema", db.Schema, "dead", "show", fmt.Sprint(ids["d1"]))
	r.want(t, 0, "died:", "")
	if strings.Contains(r.stdout, "completed:") || strings.Contains(r.stdout, "expires:") {
		t.Fatalf("dead show of a dead message labels its death as a completion:\n%s", r.stdout)
	}
	r = cli(t, db.URL, "--schema", db.Schema, "dead", "show", fmt.Sprint(ids["c1"]))
	r.want(t, 0, "completed:", "")
	if strings.Contains(r.stdout, "died:") || !strings.Contains(r.stdout, "expires:") {
		t.Fatalf("dead show of a completed message:\n%s", r.stdout)
	}
}

var (
	rowIDRE  = regexp.MustCompile(`<tr data-id="(\d+)">`)
	olderRE  = regexp.MustCompile(`<a id="older" href="[^"]*[?&;]before=(\d+)">`)
	matchRE  = regexp.MustCompile(`<strong id="match-count">(\d+)</strong>`)
	pageSize = limits.ConsoleDeadPageSize
)

// consolePages returns the ids of every page of the console's dead letters for the filter q, in the
// order shown, and the count of matching letters it states.
func consolePages(t *testing.T, srv string, q url.Values) (pages [][]int64, matching int64) {
	t.Helper()
	before := ""
	for {
		v := url.Values{}
		for k, x := range q {
			v[k] = x
		}
		if before != "" {
			v.Set("before", before)
		}
		resp, err := http.Get(srv + "/dead?" + v.Encode())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body := string(b)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /dead?%s: %d\n%s", v.Encode(), resp.StatusCode, body)
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
		m := olderRE.FindStringSubmatch(body)
		if m == nil {
			return pages, matching
		}
		before = m[1]
	}
}

// cliPages returns the ids of every page of `txinbox dead list --json` for the filter args, a page of
// the console's size at a time, following --before.
func cliPages(t *testing.T, db *testdb.DB, args ...string) [][]int64 {
	t.Helper()
	var pages [][]int64
	var before int64
	for {
		a := append([]string{"--schema", db.Schema, "dead", "list", "--json", "--limit", fmt.Sprint(pageSize)}, args...)
		if before != 0 {
			a = append(a, "--before", fmt.Sprint(before))
		}
		ls := decode[[]deadLetterJSON](t, cli(t, db.URL, a...))
		page := make([]int64, len(ls))
		for i, l := range ls {
			page[i] = l.ID
		}
		if len(page) > 0 || len(pages) == 0 {
			pages = append(pages, page)
		}
		if len(ls) < pageSize {
			return pages
		}
		before = ls[len(ls)-1].Seq
	}
}

// The CLI's dead list and the console's dead letters are one answer: for the same filter (consumer,
// kind, error text in another case than stored, a time window, combinations) they list the same
// messages in the same order (newest first, which is not id order here), page by page, and the
// console's count matches.
func TestDeadListMatchesConsole(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// 130 messages: consumers billing and mail, kinds Invoice and Refund, three error texts.
	errs := []string{"Card DECLINED by issuer", "card declined: insufficient funds", "SMTP timeout"}
	var ids []int64
	for i := range 130 {
		consumer, kind := "billing", "Invoice"
		if i%3 == 0 {
			consumer = "mail"
		}
		if i%4 == 0 {
			kind = "Refund"
		}
		r, err := c.Receive(ctx, inbox.Message{Consumer: consumer, Key: fmt.Sprintf("k-%d", i), Kind: kind, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	// They die in an order that is not their ids' (a step of 47 through 130), one statement each, the
	// first half a day earlier.
	b := &pgx.Batch{}
	for n := range 130 {
		i := (n * 47) % 130
		age := "0"
		if n < 65 {
			age = "1 day"
		}
		b.Queue(db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
			UPDATE {schema}.inbox SET state = 'dead', attempts_started = 2, attempts_failed = 2, last_error = $2,
				completed_at = now() - $3::interval WHERE id = $1`), ids[i], errs[i%3], age)
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

	recent := "12h" // the second half died now, the first a day ago
	for _, f := range []struct {
		console url.Values
		cli     []string
		want    int64 // matching letters
	}{
		{url.Values{}, nil, 130},
		{url.Values{"consumer": {"mail"}}, []string{"--consumer", "mail"}, 44},
		{url.Values{"kind": {"Refund"}}, []string{"--kind", "Refund"}, 33},
		{url.Values{"error": {"declined"}}, []string{"--error", "DECLINED"}, 87},
		{url.Values{"error": {"smtp TIMEOUT"}}, []string{"--error", "Smtp Timeout"}, 43},
		{url.Values{"consumer": {"billing"}, "kind": {"Invoice"}, "error": {"CARD"}}, []string{"--consumer", "billing", "--kind", "Invoice", "--error", "card"}, -1},
		{url.Values{"error": {"nothing like it"}}, []string{"--error", "nothing like it"}, 0},
	} {
		web, matching := consolePages(t, srv.URL, f.console)
		term := cliPages(t, db, f.cli...)
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
		if len(all) > pageSize && slices.IsSorted(all) {
			t.Errorf("filter %v: listed in id order; want the order they died in", f.console)
		}
	}
	// A window of time: those that died in the last 12 hours (the second half).
	since := decode[[]deadLetterJSON](t, cli(t, db.URL, "--schema", db.Schema, "dead", "list", "--json", "--limit", "1000", "--since", recent))
	web, _ := consolePages(t, srv.URL, url.Values{"since": {since[len(since)-1].DiedAt.UTC().Format("2006-01-02T15:04:05.999999999Z07:00")}})
	var all []int64
	for _, p := range web {
		all = append(all, p...)
	}
	got := make([]int64, len(since))
	for i, l := range since {
		got[i] = l.ID
	}
	if len(got) != 65 || !slices.Equal(all, got) {
		t.Errorf("since: the CLI lists %d %v, the console %d %v", len(got), got, len(all), all)
	}
}

// dead show names the event a message was delivered as, from its headers ce-id and ce-source (as the
// adapters' sinks store a CloudEvents event's id and source): the upstream event and source, in the
// text and the JSON; a message without them shows none.
func TestDeadShowNamesTheUpstreamEvent(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const eventID, source = "0190a8c2-6a1b-7c3d-9e4f-0123456789ab", "/txinbox/orders"
	r, err := c.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: eventID, Kind: "order.created", Payload: []byte(`{}`),
		Headers: map[string]string{"ce-id": eventID, "ce-source": source}})
	if err != nil {
		t.Fatal(err)
	}
	from := fmt.Sprint(r.ID)
	f := shownFields(cli(t, db.URL, "--schema", db.Schema, "dead", "show", from).stdout)
	if f["upstream event"] != eventID || f["upstream source"] != source {
		t.Fatalf("dead show: upstream event %q, source %q; want %q, %q", f["upstream event"], f["upstream source"], eventID, source)
	}
	j := decode[map[string]any](t, cli(t, db.URL, "--schema", db.Schema, "--json", "dead", "show", from))
	if j["upstream_event_id"] != eventID || j["upstream_source"] != source || j["key"] != eventID {
		t.Fatalf("dead show --json: %v", j)
	}
	f = shownFields(cli(t, db.URL, "--schema", db.Schema, "dead", "show", fmt.Sprint(ids["d1"])).stdout)
	if f["upstream event"] != "-" || f["upstream source"] != "-" {
		t.Fatalf("dead show of a message without ce- headers: upstream event %q, source %q; want -", f["upstream event"], f["upstream source"])
	}
	j = decode[map[string]any](t, cli(t, db.URL, "--schema", db.Schema, "--json", "dead", "show", fmt.Sprint(ids["d1"])))
	if _, ok := j["upstream_event_id"]; ok {
		t.Fatalf("dead show --json of a message without ce- headers: %v", j)
	}
	// Its other keys are inbox.StoredMessage's.
	m, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := m.GetMessage(context.Background(), ids["d1"])
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sm)
	var want map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if got, w := slices.Sorted(maps.Keys(j)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
		t.Fatalf("dead show --json keys %v, inbox.StoredMessage's %v", got, w)
	}
}
