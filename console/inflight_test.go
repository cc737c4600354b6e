package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
)

var inflightRowRE = regexp.MustCompile(`<tr data-id="(\d+)" data-state="`)

// inflightIDs returns the ids of the rows of an in-flight page, in order.
func inflightIDs(body string) []int64 {
	var out []int64
	for _, m := range inflightRowRE.FindAllStringSubmatch(body, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64) // \d+
		out = append(out, id)
	}
	return out
}

// link returns the href of the link of the cell class in the row of consumer (or topic, with attr
// data-topic) of body, unescaped; "" when the cell is not a link.
func link(t *testing.T, body, attr, name, class string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr ` + attr + `="` + regexp.QuoteMeta(name) + `">(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil {
		t.Fatalf("no row %s=%s in:\n%s", attr, name, body)
	}
	m := regexp.MustCompile(`<td class="n ` + class + `"><a href="([^"]*)">`).FindStringSubmatch(row[1])
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// The overview's Pending, Retrying and Claimed counts link to the list of that consumer's queued
// messages in that state, which lists exactly them, page by page; a message's page shows its attempt
// history.
func TestInflightPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ctx := context.Background()
	keys := make([]string, 53)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	ids := e.receive(t, "billing", "Invoice", keys...)
	e.receive(t, "mail", "Send", "x")
	// ids[0] retrying: its batch was charged as a crash (owner w0); ids[1] processing (owner w1).
	st := schemasql.New(e.Schema)
	rec, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(e.Pool), sqlc.RecordBatchParams{Consumer: "billing", Xid: "3", Ids: ids[:1], Owner: "w0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemasql.Queries.ChargeBatch(ctx, st.Wrap(e.Pool), "billing", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := schemasql.Queries.RecordBatch(ctx, st.Wrap(e.Pool), sqlc.RecordBatchParams{Consumer: "billing", Xid: "1", Ids: ids[1:2], Owner: "w1"}); err != nil {
		t.Fatal(err)
	}
	code, body := e.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	follow := func(href string) []int64 {
		t.Helper()
		var all []int64
		for href != "" {
			code, page := e.get(t, href)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", href, code, page)
			}
			all = append(all, inflightIDs(page)...)
			href = ""
			if m := regexp.MustCompile(`<a id="older" href="([^"]*)">`).FindStringSubmatch(page); m != nil {
				href = html.UnescapeString(m[1])
			}
		}
		return all
	}
	for class, want := range map[string][]int64{"retrying": ids[:1], "claimed": ids[1:2]} {
		href := link(t, body, "data-consumer", "billing", class)
		if !strings.HasPrefix(href, "/inflight?consumer=billing&state=") {
			t.Fatalf("billing %s: link %q", class, href)
		}
		if got := follow(href); !slices.Equal(got, want) {
			t.Errorf("billing %s: %v listed, want %v", class, got, want)
		}
	}
	// 51 pending: two pages of 50, newest first.
	pending := slices.Clone(ids[2:])
	slices.Reverse(pending)
	if got := follow(link(t, body, "data-consumer", "billing", "pending")); !slices.Equal(got, pending) {
		t.Errorf("billing pending: %v, want %v", got, pending)
	}
	if link(t, body, "data-consumer", "mail", "retrying") != "" {
		t.Errorf("mail's retrying count of 0 is a link")
	}
	_, page := e.get(t, "/inflight?state=processing")
	if !strings.Contains(page, `data-state="processing"`) || !strings.Contains(page, "w1") {
		t.Errorf("processing page lacks the owner:\n%s", page)
	}
	// The retrying message's page shows its history.
	_, msg := e.get(t, fmt.Sprintf("/message?id=%d", ids[0]))
	h := regexp.MustCompile(`(?s)<table id="m-history">(.*?)</table>`).FindStringSubmatch(msg)
	if h == nil || !strings.Contains(h[1], "crashed") || !strings.Contains(h[1], "w0") || !strings.Contains(h[1], "never finished") {
		t.Fatalf("message page: no attempt history:\n%s", msg)
	}
	if code, _ := e.get(t, "/inflight?state=dead"); code != http.StatusBadRequest {
		t.Errorf("state=dead: %d, want 400", code)
	}
}

// The outbox page's counts link to the list of the topic's queued events, and an event's page shows
// its attempt history.
func TestOutboxInflightPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := outboxtest.Publish(t, e.DB, outbox.Message{Topic: "orders", Key: "k1", Payload: []byte(`{}`), Headers: map[string]string{"fail": "broker down"}},
		outbox.Message{Topic: "orders", Key: "k2", Payload: []byte(`{}`)})
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil) // ids[0] retrying, ids[1] sent
	later := outboxtest.Publish(t, e.DB, outbox.Message{Topic: "orders", Payload: []byte(`{}`)})
	_, body := e.get(t, "/outbox")
	for class, want := range map[string][]int64{"retrying": ids[:1], "pending": later} {
		href := link(t, body, "data-topic", "orders", class)
		if !strings.HasPrefix(href, "/outbox/inflight?") {
			t.Fatalf("orders %s: link %q", class, href)
		}
		code, page := e.get(t, href)
		if got := inflightIDs(page); code != http.StatusOK || !slices.Equal(got, want) {
			t.Errorf("orders %s: %d, %v listed, want %v", class, code, got, want)
		}
	}
	_, ev := e.get(t, fmt.Sprintf("/outbox/event?id=%d", ids[0]))
	h := regexp.MustCompile(`(?s)<table id="e-history">(.*?)</table>`).FindStringSubmatch(ev)
	if h == nil || !strings.Contains(h[1], "broker down") || !strings.Contains(h[1], "error") {
		t.Fatalf("event page: no attempt history:\n%s", ev)
	}
}
