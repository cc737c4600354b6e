// Package console is txinbox's operator console: a few server-rendered HTML pages, mountable as an
// [http.Handler] in a service (behind its own authentication) or served by `txinbox ui`.
//
// Pages:
//
//   - Overview ("/"): per consumer, the messages pending (waiting, never claimed), retrying (waiting,
//     claimed before: failed, handed back by a stopping pool, or replayed), claimed and dead, the wait
//     of the oldest due message, and the finished attempts of the last hour as a chart; the tables' vacuum
//     figures and what holds back the xmin horizon. It reloads itself every [Config.RefreshInterval].
//   - Message ("/message?id=N" or "?consumer=C&key=K"): every field of one stored message.
//   - Dead letters ("/dead"): filtered by consumer, kind, error text (a substring in any case) and time
//     of death, newest first, as admin.Admin.ListDead lists them (the txinbox command's dead list
//     gives the same answer), with replay and discard of one, of a selection or of everything
//     matching the filter.
//   - Discard of the pending messages of a retired consumer ("/pending/confirm?consumer=C").
//   - Outbox ("/outbox"): the transactional outbox's events per topic (package outbox): pending,
//     retrying and claimed (in flight), sent (kept for the retention window) and dead, and the age of
//     the oldest unsent event (the lag), as admin.Admin.OutboxStats counts them.
//   - Dead outbox events ("/outbox/dead"): filtered by topic, key, error text and time of death,
//     newest first, as admin.Admin.ListDead lists them (admin.Outbox; the txinbox command's outbox
//     dead list gives the same answer), with replay and discard as for dead letters.
//   - Outbox event ("/outbox/event?id=N", or ?id= its event id, the UUID a consumer sees): every
//     field of one outbox event.
//   - Pause or resume a consumer or an outbox topic ("/pause/confirm?op=pause&view=inbox&name=C",
//     view outbox for a topic), through admin.Admin.Pause and Resume; the overview and the outbox
//     page mark what is paused (a "paused" badge, with who paused it, when and why), and the
//     overview lists every pause.
//
// A message delivered as a CloudEvents event (every event of a txinbox outbox is) names that event on
// its page: "from event <id> of <source>" (admin.Upstream: its headers ce-id and ce-source), the event
// id to look up in the publishing service's console (not a link: another service's database).
//
// Every figure and every change goes through package admin (admin.Admin.Overview, Health, ListDead,
// ...): the console runs no statement of its own. Figures: pending, retrying, claimed and dead counts
// are exact (read from the queue and the dead-letter set, never from the inbox table); the per-minute completed/failed/dead counts come from
// the roll-up (each batch's transaction records its counts with its outcomes, and the schema's
// maintainer folds them every maintain.Config.RollupInterval: exact once folded, up to that interval
// late); table and horizon figures are PostgreSQL's statistics (estimates): Dead rows % is dead row
// versions / (live rows + dead row versions), at most 100%.
//
// Every change is a POST carrying a CSRF token (an HMAC of a random cookie; requests that a browser
// marks cross-origin are refused as well) and goes through a confirmation page that states how many
// messages it will change. A bulk action on "everything matching a filter" is bound to what the
// confirmation counted: dead letters that died after it, or pending messages received after it, are
// never included, and if more messages match than were confirmed the action changes nothing and asks
// for a new confirmation. With [Config.ReadOnly] no change is offered and every POST is refused.
//
// Every value shown (keys, kinds, errors, payloads, headers come from outside) is escaped by
// html/template; the pages load only their own embedded stylesheet and script (a Content Security
// Policy forbids anything else), so they work without network access.
package console

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/internal/limits"
)

// Limits of the pages.
const (
	// deadPageSize is the number of dead letters (or dead outbox events) per page.
	deadPageSize = limits.ConsoleDeadPageSize
	// maxBulk is the most messages one confirmed action changes (100,000); a filter matching more
	// must be narrowed (or the action repeated).
	maxBulk = limits.ConsoleBulk
	// chartMinutes is the span of the overview's chart.
	chartMinutes = 60
)

// Config configures the console. The zero value is valid.
type Config struct {
	// ReadOnly hides every action and refuses every POST (403). Default: false.
	ReadOnly bool
	// Prefix is the path the handler is mounted under, with [http.StripPrefix], such as "/ops/inbox"
	// (no trailing slash); links and the CSRF cookie's path start with it. Default: "" (the root).
	Prefix string
	// RefreshInterval is how often the overview reloads itself; negative: never. Default: 10s.
	RefreshInterval time.Duration
	// QueryTimeout bounds the statements of one page or action (an action's statements each).
	// Default: 10s.
	QueryTimeout time.Duration
}

type configError struct{ field, reason string }

func (c *Config) check() *configError {
	switch {
	case c.Prefix != "" && (!strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/")):
		return &configError{"Prefix", "must start with / and not end with / (or be empty)"}
	case strings.ContainsAny(c.Prefix, "?#\"'<> "):
		return &configError{"Prefix", "must be a plain path"}
	case c.QueryTimeout < 0:
		return &configError{"QueryTimeout", "must not be negative"}
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = 10 * time.Second
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 10 * time.Second
	}
	return nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// handler serves the pages. Every figure and every change goes through its admin.Admin: the console
// presents what package admin answers (the CLI presents the same answers), and runs no statement
// of its own.
type handler struct {
	cfg    Config
	schema string       // the Store's schema
	log    *slog.Logger // the Store's Logger
	admin  *admin.Admin
	key    []byte // CSRF HMAC key, random per handler
	pages  map[string]*template.Template
	static http.Handler // the embedded files under /static/
	mux    *http.ServeMux
}

// route is one entry of the console's router: a [http.ServeMux] pattern, which always names its
// method, and the handler method that serves it.
type route struct {
	pattern string
	serve   func(h *handler, w http.ResponseWriter, r *http.Request)
}

// routes is every route of the console, and the only place one is registered: newHandler builds its
// ServeMux from this list, and the tests read it to find every route that changes something (every
// method but GET and HEAD), each of which ServeHTTP guards with the CSRF check.
var routes = []route{
	{"GET /static/", func(h *handler, w http.ResponseWriter, r *http.Request) { h.static.ServeHTTP(w, r) }},
	{"GET /{$}", (*handler).overview},
	{"GET /message", (*handler).message},
	{"GET /dead", (*handler).deadList},
	{"GET /inflight", (*handler).inflightList},
	{"GET /dead/confirm", (*handler).deadConfirm},
	{"POST /dead/apply", (*handler).deadApply},
	{"GET /pending/confirm", (*handler).pendingConfirm},
	{"POST /pending/apply", (*handler).pendingApply},
	{"GET /outbox", (*handler).outboxOverview},
	{"GET /outbox/inflight", (*handler).outboxInflightList},
	{"GET /outbox/dead", (*handler).outboxDeadList},
	{"GET /outbox/dead/confirm", (*handler).outboxDeadConfirm},
	{"POST /outbox/dead/apply", (*handler).outboxDeadApply},
	{"GET /outbox/event", (*handler).outboxEvent},
	{"GET /pause/confirm", (*handler).pauseConfirm},
	{"POST /pause/apply", (*handler).pauseApply},
}

func newHandler(store txinbox.Store, cfg Config, a *admin.Admin) (http.Handler, error) {
	h := &handler{cfg: cfg, schema: store.Schema, log: store.Logger, admin: a, key: make([]byte, 32),
		pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	if _, err := rand.Read(h.key); err != nil {
		return nil, err
	}
	for _, p := range pageNames {
		t, err := parsePage(p)
		if err != nil {
			return nil, err
		}
		h.pages[p] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	h.static = http.StripPrefix("/static/", http.FileServerFS(static))
	for _, rt := range routes {
		h.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) { rt.serve(h, w, r) })
	}
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "cross-origin request refused")
	}))
	return cop.Handler(h), nil
}

// pageNames are the console's pages: each a template of its own in the layout.
var pageNames = []string{"overview", "message", "dead", "confirm", "result", "error", "outbox", "outbox_dead", "outbox_event", "inflight", "pause"}

// parsePage returns the template of the page name, in the layout.
func parsePage(name string) (*template.Template, error) {
	t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
	if err != nil {
		return nil, fmt.Errorf("console: template %s: %w", name, err)
	}
	return t, nil
}

// ServeHTTP sets the security headers and, for every method but GET and HEAD (a POST: the only
// other method a route takes), checks read-only mode and the CSRF token before any handler runs.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if h.cfg.ReadOnly {
			h.fail(w, r, http.StatusForbidden, "the console is read-only: nothing was changed")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "unreadable form: "+err.Error())
			return
		}
		if !h.csrfOK(r) {
			h.fail(w, r, http.StatusForbidden, "missing or invalid CSRF token: nothing was changed (reload the page and try again)")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// ---- CSRF: the token is the HMAC of a random cookie, compared in constant time ----

const csrfCookie = "txinbox_console_csrf"

func (h *handler) mac(nonce string) string {
	m := hmac.New(sha256.New, h.key)
	_, _ = io.WriteString(m, nonce)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfToken returns the token of the request's cookie, setting a new cookie when there is none.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return h.mac(c.Value)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	nonce := base64.RawURLEncoding.EncodeToString(b)
	path := h.cfg.Prefix + "/"
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: nonce, Path: path, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return h.mac(nonce)
}

func (h *handler) csrfOK(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) < 32 {
		return false
	}
	got := r.PostForm.Get("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.mac(c.Value))) == 1
}

// ---- rendering ----

// page is what every template gets.
type page struct {
	Title    string
	P        string // Config.Prefix
	ReadOnly bool
	CSRF     string
	Refresh  int // seconds; 0: no reload
	Schema   string
	Now      time.Time
	Data     any
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	p := page{Title: title, P: h.cfg.Prefix, ReadOnly: h.cfg.ReadOnly, CSRF: h.csrfToken(w, r),
		Schema: h.schema, Now: time.Now().UTC(), Data: data}
	if name == "overview" && h.cfg.RefreshInterval > 0 {
		p.Refresh = max(1, int(h.cfg.RefreshInterval/time.Second))
	}
	var b strings.Builder
	if err := h.pages[name].Execute(&b, p); err != nil {
		h.log.Error("txinbox console: rendering failed", "page", name, "err", err)
		http.Error(w, "rendering failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, b.String())
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", http.StatusText(status), struct {
		Status  int
		Message string
	}{status, msg})
}

// dbFail reports a database error.
func (h *handler) dbFail(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.log.Error("txinbox console: "+what+" failed", "path", r.URL.Path, "err", err)
	msg := what + " failed: " + err.Error()
	if strings.Contains(err.Error(), "SQLSTATE 42P01") {
		version := "3"
		if strings.HasPrefix(r.URL.Path, "/outbox") {
			version = "9" // the outbox's tables
		}
		msg += " — are the txinbox tables (version " + version + " or later) in schema " + strconv.Quote(h.schema) + "? Run 'txinbox migrate up'."
	}
	h.fail(w, r, http.StatusInternalServerError, msg)
}

func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
}

// ---- input ----

// inputError is a bad query or form value: 400, nothing done.
type inputError struct{ field, reason string }

func (e *inputError) Error() string { return e.field + ": " + e.reason }

func text(field, v string) (string, error) {
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return "", &inputError{field, "must be valid UTF-8 without NUL"}
	}
	if len(v) > 4096 {
		return "", &inputError{field, "longer than 4096 bytes"}
	}
	return v, nil
}

func positive(field, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, &inputError{field, strconv.Quote(v) + " is not a positive integer"}
	}
	return n, nil
}

func optPositive(field, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	return positive(field, v)
}

// timeHint is how the forms ask for a time (their placeholder), in the words of the layout the form
// reads: year, month, day, T, hours and minutes, UTC.
const timeHint = "YYYY-MM-DDThh:mm"

// parseTime reads a time given as RFC 3339 or as the form's YYYY-MM-DDThh:mm (UTC).
func parseTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, &inputError{field, strconv.Quote(v) + " is not a time (" + timeHint + ", UTC)"}
}

func ids(field string, vs []string) ([]int64, error) {
	out := make([]int64, 0, len(vs))
	for _, v := range vs {
		n, err := positive(field, v)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if len(out) > maxAdminIDs {
		return nil, &inputError{field, fmt.Sprintf("%d ids, more than %d", len(out), maxAdminIDs)}
	}
	return out, nil
}

// ---- helpers for templates ----

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"age": func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		return d.Round(time.Second).String()
	},
	"num": func(n int64) string {
		s := strconv.FormatInt(n, 10)
		if n < 0 {
			return s
		}
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	},
	"bytes": func(n int64) string {
		const unit = 1024
		if n < unit {
			return fmt.Sprintf("%d B", n)
		}
		div, exp := int64(unit), 0
		for m := n / unit; m >= unit; m /= unit {
			div *= unit
			exp++
		}
		return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
	},
	"pct": func(part, whole int64) string {
		if whole <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
	},
	"capital":  capital,
	"timeHint": func() string { return timeHint },
	// plural is one when n is 1, else many: "1 dead letter", "2 dead letters".
	"plural": func(n int64, one, many string) string {
		if n == 1 {
			return one
		}
		return many
	},
	// share shows a fraction between 0 and 1 as a percentage.
	"share": func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	// clip cuts s to at most n runes, marking the cut with an ellipsis.
	"clip": func(n int, s string) string {
		if utf8.RuneCountInString(s) <= n {
			return s
		}
		return string([]rune(s)[:n-1]) + "…"
	},
}

// prettyJSON indents a JSON document for display, keeping its keys and numbers as stored; "" for
// none.
func prettyJSON(b []byte) string {
	if len(b) == 0 || string(b) == "null" {
		return ""
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}
