// Package e2e drives the operator console (package console) in headless Chromium against a real
// PostgreSQL. It is a module of its own so that chromedp is never downloaded by users of txinbox.
//
// The browser is Debian's chromium (CHROMIUM_PATH overrides where it is looked for). When it is
// missing the tests skip, saying why; with CI=true they fail instead. TXINBOX_UPDATE_SCREENSHOT=1
// writes the overview's screenshot to docs/console.png (the README shows it).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// browserPath finds Chromium, or skips (fails with CI=true) when there is none.
func browserPath(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("CHROMIUM_PATH"), "chromium", "chromium-browser", "google-chrome"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	msg := "no Chromium found (install Debian's chromium package: apt-get install -y chromium, or set CHROMIUM_PATH)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile for t and returns a tab's context, and the
// dialogs (alert, confirm, prompt) the pages opened, which are dismissed.
func browser(t *testing.T) (context.Context, *dialogs) {
	t.Helper()
	path := browserPath(t)
	profile, err := os.MkdirTemp("", "txinbox-e2e-chromium")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile), chromedp.WindowSize(1400, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(bctx) // closes the browser and waits for it
		bcancel()
		acancel()
		cancel()
		_ = os.RemoveAll(profile)
	})
	d := &dialogs{}
	chromedp.ListenTarget(bctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			d.add(e.Message)
			go func() { _ = chromedp.Run(bctx, page.HandleJavaScriptDialog(false)) }()
		}
	})
	if err := chromedp.Run(bctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return bctx, d
}

type dialogs struct {
	mu   sync.Mutex
	msgs []string
}

func (d *dialogs) add(m string) { d.mu.Lock(); d.msgs = append(d.msgs, m); d.mu.Unlock() }

func (d *dialogs) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.msgs...)
}

type env struct {
	*testdb.DB
	c      *inbox.Client
	url    string
	broken atomic.Bool // the handler fails permanently while set
}

// newEnv seeds nothing: it migrates a schema, serves the console on it and creates the effects
// table the handler writes.
func newEnv(t *testing.T, cfg console.Config) *env {
	t.Helper()
	db := testdb.New(t)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.RefreshInterval = -1 // no reload in the middle of a test
	st := db.Store()
	st.Logger = slog.New(slog.DiscardHandler)
	h, err := console.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`CREATE TABLE {schema}.effects (key text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`)); err != nil {
		t.Fatal(err)
	}
	return &env{DB: db, c: c, url: srv.URL}
}

type invoice struct {
	Amount int `json:"amount"`
}

func (e *env) receive(t *testing.T, consumer string, keys ...string) []int64 {
	t.Helper()
	out := make([]int64, len(keys))
	for i, k := range keys {
		r, err := e.c.Receive(context.Background(), inbox.Message{Consumer: consumer, Key: k, Kind: "Invoice",
			Payload: []byte(`{"amount": 42}`), Headers: map[string]string{"source": "e2e"}})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r.ID
	}
	return out
}

// pool runs a worker pool for consumer: its handler records one effect per key, or fails permanently
// (the message dies at once, with errText) while e.broken is set. Stopped when t ends.
func (e *env) pool(t *testing.T, consumer, errText string) {
	t.Helper()
	hs := worker.NewHandlers()
	worker.Handle(hs, "Invoice", func(ctx context.Context, tx pgx.Tx, m *worker.Message[invoice]) error {
		if e.broken.Load() {
			return txinbox.Permanent(errors.New(errText))
		}
		_, err := tx.Exec(ctx, e.SQL(`INSERT INTO {schema}.effects (key) VALUES ($1)`), m.Key)
		return err
	})
	st := e.Store()
	st.Logger = slog.New(slog.DiscardHandler)
	p, err := worker.New(st, worker.Config{Consumer: consumer, Handlers: hs, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
}

// waitFor polls cond until it holds (the deadline only keeps a broken test from hanging).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) count(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	return e.Count(t, query, args...)
}

func (e *env) state(t *testing.T, id int64) string {
	t.Helper()
	var s string
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT coalesce((SELECT state FROM {schema}.inbox WHERE id = $1), 'gone')`), id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, ctx context.Context, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	run(t, ctx, chromedp.Text(sel, &s, chromedp.ByQuery))
	return strings.TrimSpace(s)
}

// The overview shows the counts of a seeded database, read from the rendered page.
func TestOverviewCounts(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, _ := browser(t)
	// billing: 3 complete, 2 die (worker), then 4 pending (no worker for them yet: a second consumer).
	e.receive(t, "billing", "b-1", "b-2", "b-3")
	e.pool(t, "billing", "card declined")
	waitFor(t, "3 completed", func() bool { return e.count(t, `SELECT count(*) FROM {schema}.effects`) == 3 })
	e.broken.Store(true)
	e.receive(t, "billing", "b-4", "b-5")
	waitFor(t, "2 dead", func() bool { return e.count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead'`) == 2 })
	e.receive(t, "shipping", "s-1", "s-2", "s-3", "s-4")
	// The rollup holds the last hour for the chart (the pool adds its own counts every few seconds).
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`INSERT INTO {schema}.inbox_rollup (consumer, minute, completed, failed, dead)
		SELECT 'shipping', date_trunc('minute', now()) - make_interval(mins => g), 20 + (g * 7) % 13, (g % 9 = 0)::int * 3, 0
		FROM generate_series(1, 59) g
		UNION ALL
		SELECT 'billing', date_trunc('minute', now()) - make_interval(mins => g), 5 + (g * 5) % 11, (g % 7 = 0)::int * 4, (g % 14 = 0)::int
		FROM generate_series(2, 45) g`)); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(e.url+"/"), chromedp.WaitVisible("#consumers", chromedp.ByQuery))
	for sel, want := range map[string]string{
		`tr[data-consumer="billing"] td.dead`:      "2",
		`tr[data-consumer="billing"] td.pending`:   "0",
		`tr[data-consumer="shipping"] td.pending`:  "4",
		`tr[data-consumer="shipping"] td.retrying`: "0",
		`tr[data-consumer="shipping"] td.claimed`:  "0",
	} {
		if got := text(t, ctx, sel); got != want {
			t.Errorf("%s = %q, want %q", sel, got, want)
		}
	}
	var bars int
	run(t, ctx, chromedp.Evaluate(`document.querySelectorAll('tr[data-consumer="shipping"] svg.chart rect').length`, &bars))
	if bars < 59 {
		t.Errorf("shipping chart has %d bars, want at least 59", bars)
	}
	if os.Getenv("TXINBOX_UPDATE_SCREENSHOT") == "1" {
		var png []byte
		run(t, ctx, chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "console.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Looking a message up by consumer and key from the header's form shows its fields.
func TestLookupByKey(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, _ := browser(t)
	ids := e.receive(t, "billing", "order-4711", "order-4712")
	run(t, ctx, chromedp.Navigate(e.url+"/"),
		chromedp.SetValue(`header .find input[name=consumer]`, "billing", chromedp.ByQuery),
		chromedp.SetValue(`header .find input[name=key]`, "order-4712", chromedp.ByQuery),
		chromedp.Click(`header .find button`, chromedp.ByQuery),
		chromedp.WaitVisible("#message", chromedp.ByQuery))
	if got := text(t, ctx, "#m-id"); got != fmt.Sprint(ids[1]) {
		t.Errorf("id %q, want %d", got, ids[1])
	}
	if got := text(t, ctx, "#m-state"); got != "pending" {
		t.Errorf("state %q, want pending", got)
	}
	if got := text(t, ctx, "#m-payload"); !strings.Contains(got, `"amount": 42`) {
		t.Errorf("payload %q", got)
	}
	if got := text(t, ctx, "#m-headers"); !strings.Contains(got, "source") || !strings.Contains(got, "e2e") {
		t.Errorf("headers %q", got)
	}
}

// Dead letters: filter them, replay one (it completes, once), then discard the filtered rest after
// a confirmation that states their count.
func TestDeadLettersReplayAndBulkDiscard(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, d := browser(t)
	e.broken.Store(true)
	e.pool(t, "billing", "card declined by issuer")
	ids := e.receive(t, "billing", "d-1", "d-2", "d-3", "d-4")
	waitFor(t, "4 dead", func() bool { return e.count(t, `SELECT count(*) FROM {schema}.inbox_dead`) == 4 })
	e.broken.Store(false)
	other := e.receive(t, "mail", "m-1")
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'dead', last_error = 'smtp timeout', completed_at = now() WHERE id = $1`), other[0]); err != nil {
		t.Fatal(err)
	}

	run(t, ctx, chromedp.Navigate(e.url+"/dead"),
		chromedp.SetValue(`#filters input[name=error]`, "DECLINED", chromedp.ByQuery),
		chromedp.Click(`#apply-filter`, chromedp.ByQuery),
		// The filtered page, not the one the click left: only it renders the filter as an attribute.
		chromedp.WaitVisible(`#filters input[name=error][value="DECLINED"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dead`, chromedp.ByQuery))
	if got := text(t, ctx, "#match-count"); got != "4" {
		t.Fatalf("matching %q, want 4", got)
	}
	// Replay d-2: tick it, confirm (count 1), post.
	run(t, ctx, chromedp.Click(fmt.Sprintf(`tr[data-id="%d"] input[name=id]`, ids[1]), chromedp.ByQuery),
		chromedp.Click(`#replay-selected`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-count`, chromedp.ByQuery))
	if got := text(t, ctx, "#confirm-count"); got != "1" {
		t.Fatalf("replay confirmation counts %q, want 1", got)
	}
	run(t, ctx, chromedp.Click(`#confirm-button`, chromedp.ByQuery), chromedp.WaitVisible(`#result`, chromedp.ByQuery))
	waitFor(t, "the replayed message to complete", func() bool { return e.state(t, ids[1]) == "completed" })
	if n := e.count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'd-2'`); n != 1 {
		t.Fatalf("replayed message applied %d times, want once", n)
	}
	if n := e.count(t, `SELECT attempts_started FROM {schema}.inbox WHERE id = $1`, ids[1]); n != 1 {
		t.Fatalf("replayed message took %d attempts, want 1", n)
	}

	// Discard everything matching the filter: the confirmation states 3.
	run(t, ctx, chromedp.Navigate(e.url+"/dead?error=declined"), chromedp.WaitVisible(`#discard-all`, chromedp.ByQuery),
		chromedp.Click(`#discard-all`, chromedp.ByQuery), chromedp.WaitVisible(`#confirm-count`, chromedp.ByQuery))
	if got := text(t, ctx, "#confirm-count"); got != "3" {
		t.Fatalf("bulk discard confirmation counts %q, want 3", got)
	}
	run(t, ctx, chromedp.Click(`#confirm-button`, chromedp.ByQuery), chromedp.WaitVisible(`#result`, chromedp.ByQuery))
	if got := text(t, ctx, "#result"); !strings.Contains(got, "Discarded: 3") {
		t.Fatalf("result %q", got)
	}
	for _, id := range []int64{ids[0], ids[2], ids[3]} {
		if s := e.state(t, id); s != "gone" {
			t.Errorf("message %d is %s, want discarded", id, s)
		}
	}
	if s := e.state(t, other[0]); s != "dead" {
		t.Errorf("a dead letter outside the filter is %s", s)
	}
	if got := d.list(); len(got) > 0 {
		t.Fatalf("dialogs opened: %q", got)
	}
}

// In read-only mode the pages offer no action, and a POST sent from the page is refused.
func TestReadOnlyHasNoWorkingMutation(t *testing.T) {
	e := newEnv(t, console.Config{ReadOnly: true})
	ctx, _ := browser(t)
	ids := e.receive(t, "billing", "r-1")
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'dead', last_error = 'boom', completed_at = now() WHERE id = $1`), ids[0]); err != nil {
		t.Fatal(err)
	}
	pending := e.receive(t, "billing", "r-2")
	deadEvent := outboxtest.Publish(t, e.DB, outbox.Message{Topic: "orders", Payload: []byte(`{}`), Headers: map[string]string{"refuse": "no route"}})
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil)
	for _, path := range []string{"/", "/dead", fmt.Sprintf("/message?id=%d", ids[0]), fmt.Sprintf("/dead/confirm?op=discard&scope=selected&id=%d", ids[0]),
		"/dead/confirm?op=replay&scope=filter", "/pending/confirm?consumer=billing",
		"/outbox", "/outbox/dead", fmt.Sprintf("/outbox/event?id=%d", deadEvent[0]),
		fmt.Sprintf("/outbox/dead/confirm?op=discard&scope=selected&id=%d", deadEvent[0]), "/outbox/dead/confirm?op=replay&scope=filter"} {
		var forms, actions int
		run(t, ctx, chromedp.Navigate(e.url+path), chromedp.WaitVisible("main", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelectorAll('form[method=post]').length`, &forms),
			chromedp.Evaluate(`document.querySelectorAll('#replay-selected, #discard-selected, #replay-all, #discard-all, #replay-one, #discard-one, #confirm-button, a.danger, `+
				`#outbox-replay-selected, #outbox-discard-selected, #outbox-replay-all, #outbox-discard-all, #outbox-replay-one, #outbox-discard-one').length`, &actions))
		if forms != 0 || actions != 0 {
			t.Errorf("%s: %d POST forms and %d actions in read-only mode", path, forms, actions)
		}
	}
	if got := text(t, ctx, "#readonly"); got != "read-only" {
		t.Errorf("read-only marker %q", got)
	}
	for _, post := range []string{
		fmt.Sprintf(`op=discard&scope=selected&id=%d&count=1`, ids[0]),
		fmt.Sprintf(`op=replay&scope=selected&id=%d&count=1`, ids[0]),
	} {
		if h, msg := postFromPage(t, ctx, "/dead/apply", post); h != "Forbidden" || !strings.Contains(msg, "read-only") {
			t.Errorf("POST /dead/apply %s: %q %q, want Forbidden, read-only", post, h, msg)
		}
	}
	if h, msg := postFromPage(t, ctx, "/pending/apply", fmt.Sprintf("consumer=billing&count=1&snapshot=%d", pending[0])); h != "Forbidden" || !strings.Contains(msg, "read-only") {
		t.Errorf("POST /pending/apply: %q %q, want Forbidden, read-only", h, msg)
	}
	if h, msg := postFromPage(t, ctx, "/outbox/dead/apply", fmt.Sprintf("op=discard&scope=selected&id=%d&count=1", deadEvent[0])); h != "Forbidden" || !strings.Contains(msg, "read-only") {
		t.Errorf("POST /outbox/dead/apply: %q %q, want Forbidden, read-only", h, msg)
	}
	if n := e.count(t, `SELECT count(*) FROM {schema}.outbox WHERE state = 'dead'`); n != 1 {
		t.Fatalf("after a refused POST: %d dead outbox events, want 1", n)
	}
	if a, b := e.state(t, ids[0]), e.state(t, pending[0]); a != "dead" || b != "pending" {
		t.Fatalf("after refused POSTs: %s and %s, want dead and pending", a, b)
	}
}

// postFromPage submits a form built in the current page (same origin, the session's cookie; the
// pages' Content Security Policy forbids fetch) with the fields of body, and returns the heading and
// the error text of the page it leads to.
func postFromPage(t *testing.T, ctx context.Context, path, body string) (heading, errText string) {
	t.Helper()
	js := fmt.Sprintf(`(() => {
  const f = document.createElement("form");
  f.method = "POST"; f.action = %q;
  for (const [k, v] of new URLSearchParams(%q)) {
    const i = document.createElement("input"); i.type = "hidden"; i.name = k; i.value = v; f.appendChild(i);
  }
  document.body.appendChild(f); f.submit(); return true;
})()`, path, body)
	var ok bool
	run(t, ctx, chromedp.Evaluate(js, &ok), chromedp.WaitVisible("#error", chromedp.ByQuery))
	return text(t, ctx, "h1"), text(t, ctx, "#error")
}

// A payload, key and error holding markup render as text: no dialog opens and no element is made
// from them.
func TestMarkupRendersAsText(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, d := browser(t)
	const evil = `<script>alert("xss")</script><img src=x onerror=alert(document.domain)>`
	r, err := e.c.Receive(context.Background(), inbox.Message{Consumer: "billing", Key: evil, Kind: "Invoice",
		Payload: []byte(`{"note": "<img src=x onerror=alert(1)>", "html": "<script>alert(2)</script>"}`),
		Headers: map[string]string{"x-evil": `"><svg onload=alert(3)>`}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'dead', last_error = $2, completed_at = now() WHERE id = $1`), r.ID,
		"handler failed: "+evil+"\n\tgoroutine 1 [running]:\n\tmain.handle()"); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/message?id=%d", e.url, r.ID)), chromedp.WaitVisible("#message", chromedp.ByQuery))
	if got := text(t, ctx, "#m-key"); got != evil {
		t.Errorf("key shown as %q, want the text %q", got, evil)
	}
	if got := text(t, ctx, "#m-payload"); !strings.Contains(got, `<img src=x onerror=alert(1)>`) {
		t.Errorf("payload %q", got)
	}
	if got := text(t, ctx, "#m-error"); !strings.Contains(got, `<script>alert("xss")</script>`) || !strings.Contains(got, "goroutine 1") {
		t.Errorf("error %q", got)
	}
	pages := []string{fmt.Sprintf("/message?id=%d", r.ID), "/dead", "/dead?error=" + "%3Cscript%3E", "/",
		fmt.Sprintf("/message?consumer=billing&key=%s", strings.ReplaceAll(evil, "<", "%3C"))}
	for _, p := range pages {
		var injected int
		run(t, ctx, chromedp.Navigate(e.url+p), chromedp.WaitVisible("main", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelectorAll('main img, main script, main svg[onload], body > script:not([src])').length + document.querySelectorAll('script').length - document.querySelectorAll('script[src]').length`, &injected))
		if injected != 0 {
			t.Errorf("%s: %d elements made from message data", p, injected)
		}
	}
	time.Sleep(200 * time.Millisecond) // let an onerror that fired reach the dialog listener
	if got := d.list(); len(got) > 0 {
		t.Fatalf("dialogs opened: %q", got)
	}
}

// A POST without the CSRF token is refused, even from the console's own page.
func TestPostWithoutCSRFTokenRefused(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, _ := browser(t)
	ids := e.receive(t, "billing", "c-1")
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'dead', last_error = 'boom', completed_at = now() WHERE id = $1`), ids[0]); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/dead/confirm?op=discard&scope=selected&id=%d", e.url, ids[0])),
		chromedp.WaitVisible("#confirm-form", chromedp.ByQuery))
	if h, msg := postFromPage(t, ctx, "/dead/apply", fmt.Sprintf("op=discard&scope=selected&id=%d&count=1", ids[0])); h != "Forbidden" || !strings.Contains(msg, "CSRF") {
		t.Fatalf("POST without token: %q %q, want Forbidden, CSRF", h, msg)
	}
	// The confirmation page again (the forged POST left it).
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/dead/confirm?op=discard&scope=selected&id=%d", e.url, ids[0])),
		chromedp.WaitVisible("#confirm-form", chromedp.ByQuery))
	if s := e.state(t, ids[0]); s != "dead" {
		t.Fatalf("state %s after the refused POST, want dead", s)
	}
	// The same form with its token works.
	run(t, ctx, chromedp.Click("#confirm-button", chromedp.ByQuery), chromedp.WaitVisible("#result", chromedp.ByQuery))
	if s := e.state(t, ids[0]); s != "gone" {
		t.Fatalf("state %s after the confirmed discard, want gone", s)
	}
}
