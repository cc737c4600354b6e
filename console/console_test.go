package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

type env struct {
	*testdb.DB
	c   *inbox.Client
	srv *httptest.Server
	hc  *http.Client
}

func newEnv(t *testing.T, cfg console.Config) *env {
	t.Helper()
	return newEnvOn(t, testdb.New(t), cfg)
}

// newEnvOn is newEnv on db.
func newEnvOn(t *testing.T, db *testdb.DB, cfg console.Config) *env {
	t.Helper()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := db.Store()
	st.Logger = slog.New(slog.DiscardHandler)
	h, err := console.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &env{DB: db, c: c, srv: srv, hc: hc}
}

func (e *env) receive(t *testing.T, consumer, kind string, keys ...string) []int64 {
	t.Helper()
	out := make([]int64, len(keys))
	for i, k := range keys {
		r, err := e.c.Receive(context.Background(), inbox.Message{Consumer: consumer, Key: k, Kind: kind, Payload: []byte(`{"n": 1}`)})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r.ID
	}
	return out
}

// kill marks messages dead as a worker would (queue row deleted, attempts failed, died now).
func (e *env) kill(t *testing.T, lastError string, ids ...int64) {
	t.Helper()
	_, err := e.Pool.Exec(context.Background(), e.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = ANY($1))
		UPDATE {schema}.inbox SET state = 'dead', attempts_started = 3, attempts_failed = 3, last_error = $2,
			completed_at = now(), token = 3
		WHERE id = ANY($1)`), ids, lastError)
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := e.hc.Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) post(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	resp, err := e.hc.PostForm(e.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirmForm opens a confirmation page and returns the form it would post.
func (e *env) confirmForm(t *testing.T, path string) url.Values {
	t.Helper()
	code, body := e.get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	form := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(body, -1) {
		form.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	if form.Get("csrf") == "" {
		t.Fatalf("no form with a CSRF token on %s:\n%s", path, body)
	}
	return form
}

func (e *env) state(t *testing.T, id int64) string {
	t.Helper()
	var s string
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT coalesce((SELECT state FROM {schema}.inbox WHERE id = $1), 'gone')`), id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func cell(t *testing.T, body, consumer, class string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-consumer="` + regexp.QuoteMeta(consumer) + `">(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil {
		t.Fatalf("no row for consumer %s in:\n%s", consumer, body)
	}
	m := regexp.MustCompile(`<td class="n ` + class + `">(?:<a[^>]*>)?([^<]*)`).FindStringSubmatch(row[1])
	if m == nil {
		t.Fatalf("no %s cell in row %s", class, row[1])
	}
	return m[1]
}

// The overview counts each consumer's pending, retrying, claimed and dead messages exactly, and the
// last hour's attempts from the rollup.
func TestOverviewCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.receive(t, "billing", "Invoice", "a", "b", "c", "d", "e", "f")
	e.receive(t, "mail", "Send", "x")
	ctx := context.Background()
	// c retrying (claimed once and failed: its token is 1), d claimed, e and f dead.
	if _, err := e.Pool.Exec(ctx, e.SQL(`WITH q AS (UPDATE {schema}.inbox_queue SET token = 1 WHERE id = $1)
		UPDATE {schema}.inbox SET attempts_failed = 1, attempts_started = 1, token = 1 WHERE id = $1`), ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(ctx, e.SQL(`INSERT INTO {schema}.inbox_batch (consumer, xid, ids, owner)
		SELECT consumer, '1', ARRAY[id], 'w1' FROM {schema}.inbox WHERE id = $1`), ids[3]); err != nil {
		t.Fatal(err)
	}
	e.kill(t, "boom", ids[4], ids[5])
	if _, err := e.Pool.Exec(ctx, e.SQL(`INSERT INTO {schema}.inbox_rollup (consumer, minute, completed, failed, dead)
		VALUES ('billing', date_trunc('minute', now()), 7, 3, 2), ('billing', date_trunc('minute', now()) - interval '3 hours', 100, 100, 100)`)); err != nil {
		t.Fatal(err)
	}
	code, body := e.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	for class, want := range map[string]string{"pending": "2", "retrying": "1", "claimed": "1", "dead": "2", "completed1h": "7"} {
		if got := cell(t, body, "billing", class); got != want {
			t.Errorf("billing %s = %q, want %q", class, got, want)
		}
	}
	if got := cell(t, body, "mail", "pending"); got != "1" {
		t.Errorf("mail pending = %q, want 1", got)
	}
	if !strings.Contains(body, `<svg class="chart"`) || !strings.Contains(body, `id="tables"`) {
		t.Errorf("no chart or table statistics in the overview")
	}
}

// The overview names the session holding back the xmin horizon (its pid and application), read with
// admin.Health's statements.
func TestOverviewHorizonHolder(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testdb.NewInDatabase(t), console.Config{})
	snap := testdb.HoldSnapshot(t, e.URL)
	want := fmt.Sprintf("pid %d, client backend, application %s, idle in transaction", snap.PID, snap.ApplicationName)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body := e.get(t, "/")
		if code != http.StatusOK {
			t.Fatalf("GET /: %d\n%s", code, body)
		}
		if strings.Contains(body, want) && strings.Contains(body, "<code>idempotency_keys</code>") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview never named %q:\n%s", want, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A lookup by consumer and key, or by id, shows the message; an unknown key says so (404).
func TestLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.receive(t, "billing", "Invoice", "order-17")
	code, body := e.get(t, "/message?consumer=billing&key=order-17")
	if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`<td id="m-id">%d</td>`, ids[0])) || !strings.Contains(body, `&#34;n&#34;: 1`) {
		t.Fatalf("lookup by key: %d\n%s", code, body)
	}
	if code, body := e.get(t, fmt.Sprintf("/message?id=%d", ids[0])); code != http.StatusOK || !strings.Contains(body, "order-17") {
		t.Fatalf("lookup by id: %d\n%s", code, body)
	}
	if code, body := e.get(t, "/message?consumer=billing&key=nope"); code != http.StatusNotFound || !strings.Contains(body, `id="notfound"`) {
		t.Fatalf("unknown key: %d\n%s", code, body)
	}
	if code, _ := e.get(t, "/message?id=-3"); code != http.StatusBadRequest {
		t.Fatalf("bad id: %d, want 400", code)
	}
}

// Keys, kinds, errors, payloads and headers are shown as text, never as markup.
func TestValuesEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	r, err := e.c.Receive(context.Background(), inbox.Message{Consumer: "billing", Key: evil, Kind: "Invoice",
		Payload: []byte(`{"note": "` + strings.ReplaceAll(evil, `"`, `\"`) + `"}`), Headers: map[string]string{"x-evil": evil, "ce-id": "id" + evil, "ce-source": "src" + evil}})
	if err != nil {
		t.Fatal(err)
	}
	e.kill(t, "failed: "+evil, r.ID)
	for _, path := range []string{fmt.Sprintf("/message?id=%d", r.ID), "/dead", "/dead?error=" + url.QueryEscape("<script>")} {
		code, body := e.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("GET %s: markup from a message rendered unescaped:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Fatalf("GET %s: the value is not shown as text:\n%s", path, body)
		}
	}
	// The upstream event's id and source (headers ce-id and ce-source) are shown as text.
	_, body := e.get(t, fmt.Sprintf("/message?id=%d", r.ID))
	shown := html.EscapeString(evil)
	if m := regexp.MustCompile(`(?s)<td id="m-upstream">.*?</td>`).FindString(body); !strings.Contains(m, "id"+shown) || !strings.Contains(m, "src"+shown) {
		t.Fatalf("the upstream event's id and source are not shown as text: %q", m)
	}
}

// A POST without the CSRF token (or with another cookie's token) changes nothing.
func TestPostWithoutCSRFRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.receive(t, "billing", "Invoice", "a")
	e.kill(t, "boom", ids...)
	form := e.confirmForm(t, fmt.Sprintf("/dead/confirm?op=discard&scope=selected&id=%d", ids[0]))
	form.Del("csrf")
	if code, body := e.post(t, "/dead/apply", form); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Fatalf("POST without token: %d\n%s", code, body)
	}
	form.Set("csrf", "forged-token-forged-token-forged-token-000")
	if code, _ := e.post(t, "/dead/apply", form); code != http.StatusForbidden {
		t.Fatalf("POST with a forged token: %d", code)
	}
	// A token taken from another session (cookie) is refused as well.
	other := newClientOf(e)
	form2 := e.confirmForm(t, fmt.Sprintf("/dead/confirm?op=discard&scope=selected&id=%d", ids[0]))
	resp, err := other.PostForm(e.srv.URL+"/dead/apply", form2)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST with another session's token: %d", resp.StatusCode)
	}
	if s := e.state(t, ids[0]); s != "dead" {
		t.Fatalf("state after refused POSTs: %s, want dead", s)
	}
}

func newClientOf(*env) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

// In read-only mode no action is offered and every POST is refused (before its token is looked at).
func TestReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{ReadOnly: true})
	ids := e.receive(t, "billing", "Invoice", "a", "b")
	e.kill(t, "boom", ids[0])
	_, body := e.get(t, "/dead")
	if strings.Contains(body, `id="replay-selected"`) || strings.Contains(body, `id="discard-all"`) {
		t.Fatalf("read-only dead list offers actions:\n%s", body)
	}
	code, body := e.get(t, fmt.Sprintf("/dead/confirm?op=discard&scope=selected&id=%d", ids[0]))
	if code != http.StatusOK || strings.Contains(body, `id="confirm-form"`) {
		t.Fatalf("read-only confirmation has a form: %d\n%s", code, body)
	}
	// The form a writable console would post, with this session's cookie.
	for _, path := range []string{"/dead/apply", "/pending/apply"} {
		code, body := e.post(t, path, url.Values{"op": {"discard"}, "scope": {"selected"}, "id": {fmt.Sprint(ids[0])},
			"count": {"1"}, "consumer": {"billing"}, "snapshot": {fmt.Sprint(ids[1])}})
		if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Fatalf("POST %s in read-only mode: %d\n%s", path, code, body)
		}
	}
	if s := e.state(t, ids[0]); s != "dead" {
		t.Fatalf("dead letter after read-only POST: %s", s)
	}
	if s := e.state(t, ids[1]); s != "pending" {
		t.Fatalf("pending message after read-only POST: %s", s)
	}
}

// Replaying one dead letter puts it back to pending (with its queue row); discarding a selection
// deletes exactly the selected ones.
func TestReplayAndDiscardSelected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.receive(t, "billing", "Invoice", "a", "b", "c")
	e.kill(t, "boom", ids...)
	form := e.confirmForm(t, fmt.Sprintf("/dead/confirm?op=replay&scope=selected&id=%d", ids[0]))
	if code, body := e.post(t, "/dead/apply", form); code != http.StatusOK || !strings.Contains(body, "Replayed 1 dead letters") {
		t.Fatalf("replay: %d\n%s", code, body)
	}
	if s := e.state(t, ids[0]); s != "pending" {
		t.Fatalf("replayed message is %s", s)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue WHERE id = $1`, ids[0]); n != 1 {
		t.Fatalf("replayed message has %d queue rows", n)
	}
	form = e.confirmForm(t, fmt.Sprintf("/dead/confirm?op=discard&scope=selected&id=%d&id=%d", ids[1], ids[0]))
	if form.Get("count") != "1" {
		t.Fatalf("confirmation counts %s dead letters of the selection, want 1 (the other is pending now)", form.Get("count"))
	}
	if code, body := e.post(t, "/dead/apply", form); code != http.StatusOK || !strings.Contains(body, "Discarded 1 dead letters") {
		t.Fatalf("discard: %d\n%s", code, body)
	}
	if a, b, c := e.state(t, ids[0]), e.state(t, ids[1]), e.state(t, ids[2]); a != "pending" || b != "gone" || c != "dead" {
		t.Fatalf("states after discard: %s %s %s, want pending gone dead", a, b, c)
	}
}

// A bulk action on a filter changes what the confirmation counted: a dead letter that dies after it
// is left alone, and when more match than were confirmed nothing is changed (409).
func TestBulkBoundToConfirmation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.receive(t, "billing", "Invoice", "a", "b", "c", "d")
	other := e.receive(t, "mail", "Send", "m")
	e.kill(t, "timeout talking to bank", ids[0], ids[1])
	e.kill(t, "invalid iban", ids[2])
	e.kill(t, "timeout talking to bank", other...)
	form := e.confirmForm(t, "/dead/confirm?op=discard&scope=filter&consumer=billing&error=TIMEOUT")
	if form.Get("count") != "2" || form.Get("error") != "TIMEOUT" || form.Get("consumer") != "billing" {
		t.Fatalf("confirmation form: %v", form)
	}
	e.kill(t, "timeout talking to bank", ids[3]) // dies after the confirmation
	// Tampering with the count (fewer than match) changes nothing.
	tampered := url.Values{}
	for k, v := range form {
		tampered[k] = v
	}
	tampered.Set("count", "1")
	if code, body := e.post(t, "/dead/apply", tampered); code != http.StatusConflict || !strings.Contains(body, `id="changed"`) {
		t.Fatalf("apply with a lower count: %d\n%s", code, body)
	}
	if a, b := e.state(t, ids[0]), e.state(t, ids[1]); a != "dead" || b != "dead" {
		t.Fatalf("a refused bulk action changed something: %s %s", a, b)
	}
	code, body := e.post(t, "/dead/apply", form)
	if code != http.StatusOK || !strings.Contains(body, "Discarded 2 dead letters") {
		t.Fatalf("apply: %d\n%s", code, body)
	}
	want := map[int64]string{ids[0]: "gone", ids[1]: "gone", ids[2]: "dead", ids[3]: "dead", other[0]: "dead"}
	for id, s := range want {
		if got := e.state(t, id); got != s {
			t.Errorf("message %d: %s, want %s", id, got, s)
		}
	}
}

// Discarding a retired consumer's pending messages deletes those counted by the confirmation and no
// message received after it.
func TestDiscardPendingOfConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.receive(t, "retired", "Old", "a", "b", "c")
	keep := e.receive(t, "billing", "Invoice", "x")
	form := e.confirmForm(t, "/pending/confirm?consumer=retired")
	if form.Get("count") != "3" {
		t.Fatalf("confirmation count %s, want 3", form.Get("count"))
	}
	late := e.receive(t, "retired", "Old", "late")
	code, body := e.post(t, "/pending/apply", form)
	if code != http.StatusOK || !strings.Contains(body, "Discarded 3 pending messages") {
		t.Fatalf("apply: %d\n%s", code, body)
	}
	for _, id := range ids {
		if s := e.state(t, id); s != "gone" {
			t.Errorf("message %d: %s, want gone", id, s)
		}
	}
	if a, b := e.state(t, late[0]), e.state(t, keep[0]); a != "pending" || b != "pending" {
		t.Fatalf("late %s, other consumer %s; want both pending", a, b)
	}
}

// Bad input gets a 400 with the reason, and New rejects a bad configuration.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	for _, path := range []string{"/dead?since=yesterday", "/dead?before=x", "/dead/confirm?op=explode&scope=filter",
		"/dead/confirm?op=replay&scope=selected", "/message?consumer=billing", "/pending/confirm?consumer="} {
		if code, body := e.get(t, path); code != http.StatusBadRequest || !strings.Contains(body, `id="error"`) {
			t.Errorf("GET %s: %d, want 400\n%s", path, code, body)
		}
	}
	if _, err := console.New(txinbox.Store{DB: e.Pool, Schema: "bad schema"}, console.Config{}); err == nil {
		t.Error("New accepted a bad schema")
	}
	for _, cfg := range []console.Config{{Prefix: "ops/"}, {QueryTimeout: -time.Second}} {
		if _, err := console.New(e.Store(), cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// Mounted under a prefix, its links and forms carry the prefix.
func TestPrefix(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h, err := console.New(db.Store(), console.Config{Prefix: "/ops/inbox"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/inbox/", http.StripPrefix("/ops/inbox", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, p := range []string{"/ops/inbox/", "/ops/inbox/static/console.css", "/ops/inbox/dead"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
		if strings.HasSuffix(p, "/") && !strings.Contains(string(b), `href="/ops/inbox/dead"`) {
			t.Fatalf("links without the prefix:\n%s", b)
		}
	}
}

// The overview's Dead % is dead / (live + dead): it stays at most 100% when PostgreSQL's estimate of
// live rows is far below the dead row versions, as after many deletes (here 190 of 200 queue rows,
// autovacuum off for the table so that they stay dead). Dead / live would show 1900%.
func TestOverviewDeadShareAtMost100(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ctx := context.Background()
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%d", i)
	}
	ids := e.receive(t, "billing", "Invoice", keys...)
	if _, err := e.Pool.Exec(ctx, e.SQL(`ALTER TABLE {schema}.inbox_queue SET (autovacuum_enabled = false)`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(ctx, e.SQL(`DELETE FROM {schema}.inbox_queue WHERE id <= $1`), ids[189]); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Statistics are reported within a second or so: wait until they count the deletes.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		h, err := a.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var q admin.TableHealth
		for _, tb := range h.Tables {
			if tb.Table == "inbox_queue" {
				q = tb
			}
		}
		if q.DeadRows >= 190 && q.LiveRows <= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for the statistics of the deletes: %+v", q)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, body := e.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	m := regexp.MustCompile(`(?s)<tr data-table="inbox_queue">.*?<td class="n dead-share">([0-9.]+)%</td>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no Dead %% of inbox_queue in:\n%s", body)
	}
	share, err := strconv.ParseFloat(m[1], 64)
	if err != nil || share > 100 || share < 90 {
		t.Fatalf("Dead %% of inbox_queue = %s%%, want between 90%% and 100%% (190 dead of 200 row versions)", m[1])
	}
}

// The page of a dead message labels its completed_at as its death; a completed message's as its
// completion.
func TestMessageLabelsDeath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := e.receive(t, "billing", "Invoice", "a", "b")
	e.kill(t, "boom", ids[0])
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'completed', completed_at = now(), expires_at = now() + interval '1 day' WHERE id = $1`), ids[1]); err != nil {
		t.Fatal(err)
	}
	_, body := e.get(t, fmt.Sprintf("/message?id=%d", ids[0]))
	if !strings.Contains(body, `<th>Died</th><td id="m-died">`) || strings.Contains(body, "<th>Completed") {
		t.Fatalf("page of a dead message:\n%s", body)
	}
	_, body = e.get(t, fmt.Sprintf("/message?id=%d", ids[1]))
	if !strings.Contains(body, `<th>Completed</th><td id="m-completed">`) || strings.Contains(body, "Died") {
		t.Fatalf("page of a completed message:\n%s", body)
	}
}
