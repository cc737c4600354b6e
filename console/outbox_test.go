package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
)

// outboxDead publishes one event per topic (key k-<i>) and has a relay refuse each with the error
// text msg (stored as "permanent: " and msg): they are dead. It returns their ids.
func (e *env) outboxDead(t *testing.T, msg string, topics ...string) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, len(topics))
	for i, tp := range topics {
		msgs[i] = outbox.Message{Topic: tp, Key: fmt.Sprintf("k-%d", i), Payload: []byte(`{"n": 1}`), Headers: map[string]string{"refuse": msg}}
	}
	ids := outboxtest.Publish(t, e.DB, msgs...)
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil)
	return ids
}

// outboxState returns the state of the outbox event id, "gone" when it is not stored.
func (e *env) outboxState(t *testing.T, id int64) string {
	t.Helper()
	var s string
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT coalesce((SELECT state FROM {schema}.outbox WHERE id = $1), 'gone')`), id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func topicCell(t *testing.T, body, topic, class string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-topic="` + regexp.QuoteMeta(topic) + `">(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil {
		t.Fatalf("no row for topic %s in:\n%s", topic, body)
	}
	m := regexp.MustCompile(`<td class="n ` + class + `">(?:<a[^>]*>)?([^<]*)`).FindStringSubmatch(row[1])
	if m == nil {
		t.Fatalf("no %s cell in row %s", class, row[1])
	}
	return m[1]
}

// The outbox page shows each topic's events per state, as admin.Admin.OutboxStats counts them, and the lag;
// the navigation links to it.
func TestOutboxPageCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	code, body := e.get(t, "/outbox")
	if code != http.StatusOK || !strings.Contains(body, `id="empty"`) {
		t.Fatalf("GET /outbox of an empty outbox: %d\n%s", code, body)
	}
	msg := func(topic, refuse, fail string) outbox.Message {
		return outbox.Message{Topic: topic, Payload: []byte(`{}`), Headers: map[string]string{"refuse": refuse, "fail": fail}}
	}
	outboxtest.Publish(t, e.DB, msg("orders", "", ""), msg("orders", "refused", ""), msg("orders", "", "down"), msg("mail", "", ""))
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil)
	outboxtest.Publish(t, e.DB, msg("audit", "", ""))
	outboxtest.Hold(t, e.DB, 1)
	outboxtest.Publish(t, e.DB, msg("orders", "", ""))
	code, body = e.get(t, "/outbox")
	if code != http.StatusOK {
		t.Fatalf("GET /outbox: %d\n%s", code, body)
	}
	for topic, want := range map[string]map[string]string{
		"orders": {"pending": "1", "retrying": "1", "claimed": "0", "sent": "1", "dead": "1"},
		"mail":   {"pending": "0", "retrying": "0", "claimed": "0", "sent": "1", "dead": "0"},
		"audit":  {"pending": "0", "retrying": "0", "claimed": "1", "sent": "0", "dead": "0"},
	} {
		for class, n := range want {
			if got := topicCell(t, body, topic, class); got != n {
				t.Errorf("%s %s = %q, want %q", topic, class, got, n)
			}
		}
	}
	if lag := topicCell(t, body, "orders", "lag"); lag == "—" || !strings.HasSuffix(lag, "s") {
		t.Errorf("orders lag %q, want a duration", lag)
	}
	if lag := topicCell(t, body, "mail", "lag"); lag != "—" {
		t.Errorf("mail lag %q, want none", lag)
	}
	if !strings.Contains(body, `href="/outbox/dead?topic=orders"`) || !strings.Contains(body, `<a href="/outbox">Outbox</a>`) {
		t.Errorf("no link to orders' dead events or to the outbox in the navigation:\n%s", body)
	}
}

// The dead events page lists and filters the outbox's dead events newest first, and its event page
// shows every field; replaying one and discarding a selection change exactly those.
func TestOutboxDeadReplayAndDiscardSelected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.outboxDead(t, "no route", "orders", "orders", "mail")
	code, body := e.get(t, "/outbox/dead?topic=orders")
	if code != http.StatusOK || !strings.Contains(body, `<strong id="match-count">2</strong>`) {
		t.Fatalf("GET /outbox/dead?topic=orders: %d\n%s", code, body)
	}
	if got := rowIDs(body); fmt.Sprint(got) != fmt.Sprint([]int64{ids[1], ids[0]}) {
		t.Fatalf("listed %v, want %v (newest first)", got, []int64{ids[1], ids[0]})
	}
	code, body = e.get(t, fmt.Sprintf("/outbox/event?id=%d", ids[0]))
	if code != http.StatusOK || !strings.Contains(body, `<span class="state dead">dead</span>`) || !strings.Contains(body, "permanent: no route") ||
		!strings.Contains(body, `id="outbox-replay-one"`) || !strings.Contains(body, `<th><code>refuse</code></th>`) || !strings.Contains(body, `<th>Died</th>`) {
		t.Fatalf("event page: %d\n%s", code, body)
	}
	form := e.confirmForm(t, fmt.Sprintf("/outbox/dead/confirm?op=replay&scope=selected&id=%d", ids[0]))
	if code, body := e.post(t, "/outbox/dead/apply", form); code != http.StatusOK || !strings.Contains(body, "Replayed 1 dead outbox events") {
		t.Fatalf("replay: %d\n%s", code, body)
	}
	if s := e.outboxState(t, ids[0]); s != "pending" {
		t.Fatalf("replayed event is %s", s)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE id = $1`, ids[0]); n != 1 {
		t.Fatalf("replayed event has %d queue rows", n)
	}
	form = e.confirmForm(t, fmt.Sprintf("/outbox/dead/confirm?op=discard&scope=selected&id=%d&id=%d", ids[1], ids[0]))
	if form.Get("count") != "1" {
		t.Fatalf("confirmation counts %s dead events of the selection, want 1 (the other is pending now)", form.Get("count"))
	}
	if code, body := e.post(t, "/outbox/dead/apply", form); code != http.StatusOK || !strings.Contains(body, "Discarded 1 dead outbox events") {
		t.Fatalf("discard: %d\n%s", code, body)
	}
	if a, b, c := e.outboxState(t, ids[0]), e.outboxState(t, ids[1]), e.outboxState(t, ids[2]); a != "pending" || b != "gone" || c != "dead" {
		t.Fatalf("states after discard: %s %s %s, want pending gone dead", a, b, c)
	}
	if code, body := e.get(t, fmt.Sprintf("/outbox/event?id=%d", ids[1])); code != http.StatusNotFound || !strings.Contains(body, `id="notfound"`) {
		t.Fatalf("event page of a discarded event: %d\n%s", code, body)
	}
}

var outboxRowRE = regexp.MustCompile(`<tr data-id="(\d+)">`)

func rowIDs(body string) []int64 {
	var out []int64
	for _, m := range outboxRowRE.FindAllStringSubmatch(body, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64) // \d+
		out = append(out, id)
	}
	return out
}

// A bulk action on a filter changes what the confirmation counted: a dead event that dies after it is
// left alone, and when more match than were confirmed nothing is changed (409).
func TestOutboxBulkBoundToConfirmation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.outboxDead(t, "timeout talking to the broker", "orders", "orders")
	other := e.outboxDead(t, "invalid topic", "orders")
	mail := e.outboxDead(t, "timeout talking to the broker", "mail")
	form := e.confirmForm(t, "/outbox/dead/confirm?op=discard&scope=filter&topic=orders&error=TIMEOUT")
	if form.Get("count") != "2" || form.Get("error") != "TIMEOUT" || form.Get("topic") != "orders" || form.Get("snapshot") == "" {
		t.Fatalf("confirmation form: %v", form)
	}
	late := e.outboxDead(t, "timeout talking to the broker", "orders") // dies after the confirmation
	tampered := url.Values{}
	for k, v := range form {
		tampered[k] = v
	}
	tampered.Set("count", "1")
	if code, body := e.post(t, "/outbox/dead/apply", tampered); code != http.StatusConflict || !strings.Contains(body, `id="changed"`) {
		t.Fatalf("apply with a lower count: %d\n%s", code, body)
	}
	if a, b := e.outboxState(t, ids[0]), e.outboxState(t, ids[1]); a != "dead" || b != "dead" {
		t.Fatalf("a refused bulk action changed something: %s %s", a, b)
	}
	code, body := e.post(t, "/outbox/dead/apply", form)
	if code != http.StatusOK || !strings.Contains(body, "Discarded 2 dead outbox events") {
		t.Fatalf("apply: %d\n%s", code, body)
	}
	want := map[int64]string{ids[0]: "gone", ids[1]: "gone", other[0]: "dead", late[0]: "dead", mail[0]: "dead"}
	for id, s := range want {
		if got := e.outboxState(t, id); got != s {
			t.Errorf("event %d: %s, want %s", id, got, s)
		}
	}
	// Replay of everything matching: the rest goes back to pending.
	form = e.confirmForm(t, "/outbox/dead/confirm?op=replay&scope=filter")
	if code, body := e.post(t, "/outbox/dead/apply", form); code != http.StatusOK || !strings.Contains(body, "Replayed 3 dead outbox events") {
		t.Fatalf("replay all: %d\n%s", code, body)
	}
}

// The dead events page pages by the cursor: every dead event once, newest first, deadPageSize a page.
func TestOutboxDeadPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	topics := make([]string, limits.ConsoleDeadPageSize+7)
	for i := range topics {
		topics[i] = "t"
	}
	ids := e.outboxDead(t, "refused", topics...) // they die in batches: ties broken by id, newest first
	var seen []int64
	path := "/outbox/dead"
	for pages := 0; ; pages++ {
		code, body := e.get(t, path)
		if code != http.StatusOK || pages > 3 {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		seen = append(seen, rowIDs(body)...)
		m := regexp.MustCompile(`<a id="older" href="([^"]*)">`).FindStringSubmatch(body)
		if m == nil {
			break
		}
		path = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if len(seen) != len(ids) {
		t.Fatalf("%d listed over the pages, want %d: %v", len(seen), len(ids), seen)
	}
	for i, id := range seen {
		if id != ids[len(ids)-1-i] {
			t.Fatalf("listed %v, want every id once, newest first", seen)
		}
	}
}

// Bad input gets a 400, read-only mode offers no action and refuses every POST, and values are shown
// as text.
func TestOutboxBadInputReadOnlyAndEscaping(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	ids := outboxtest.Publish(t, e.DB, outbox.Message{Topic: "t" + evil, Key: evil, Payload: []byte(`{"note": "` + strings.ReplaceAll(evil, `"`, `\"`) + `"}`),
		Kind: "t", ContentType: `application/json; note="` + evil + `"`, Headers: map[string]string{"x-evil": evil, "refuse": evil}})
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil)
	for _, path := range []string{"/outbox", "/outbox/dead", fmt.Sprintf("/outbox/event?id=%d", ids[0]), "/outbox/dead?error=" + url.QueryEscape("<script>")} {
		code, body := e.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("GET %s: markup from an event rendered unescaped:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Fatalf("GET %s: the value is not shown as text:\n%s", path, body)
		}
	}
	// The content type (a media type's quoted parameter may hold markup) is shown as text.
	if _, body := e.get(t, fmt.Sprintf("/outbox/event?id=%d", ids[0])); !strings.Contains(body, `<td id="e-content-type"><code>application/json; note=&#34;`+html.EscapeString(evil)+`&#34;</code></td>`) {
		t.Fatalf("the content type is not shown as text:\n%s", body)
	}
	for _, path := range []string{"/outbox/dead?since=yesterday", "/outbox/dead?before=x", "/outbox/dead/confirm?op=explode&scope=filter",
		"/outbox/dead/confirm?op=replay&scope=selected", "/outbox/event?id=-1"} {
		if code, body := e.get(t, path); code != http.StatusBadRequest || !strings.Contains(body, `id="error"`) {
			t.Errorf("GET %s: %d, want 400\n%s", path, code, body)
		}
	}

	ro := newEnvOn(t, e.DB, console.Config{ReadOnly: true})
	_, body := ro.get(t, "/outbox/dead")
	if strings.Contains(body, `id="outbox-replay-selected"`) || strings.Contains(body, `id="outbox-discard-all"`) || !strings.Contains(body, fmt.Sprintf(`data-id="%d"`, ids[0])) {
		t.Fatalf("read-only dead events page offers actions:\n%s", body)
	}
	if _, body := ro.get(t, fmt.Sprintf("/outbox/event?id=%d", ids[0])); strings.Contains(body, `id="outbox-replay-one"`) {
		t.Fatalf("read-only event page offers actions:\n%s", body)
	}
	code, body := ro.post(t, "/outbox/dead/apply", url.Values{"op": {"discard"}, "scope": {"selected"}, "id": {fmt.Sprint(ids[0])}, "count": {"1"}})
	if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Fatalf("POST /outbox/dead/apply in read-only mode: %d\n%s", code, body)
	}
	if s := e.outboxState(t, ids[0]); s != "dead" {
		t.Fatalf("dead event after a read-only POST: %s", s)
	}
}
