package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/console"
)

// stateChangingRoutes returns the router's routes that take a method other than GET and HEAD, read
// from the list the console builds its ServeMux from. A pattern without a method (which would serve
// every method) is an error of t.
func stateChangingRoutes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, p := range console.Routes() {
		method, _, ok := strings.Cut(p, " ")
		if !ok || method == "" || strings.HasPrefix(method, "/") {
			t.Errorf("route %q names no method: it would serve every method", p)
			continue
		}
		if method != http.MethodGet && method != http.MethodHead {
			out = append(out, p)
		}
	}
	return out
}

// postCases holds, for each state-changing route, how to seed data that the route changes and the
// path of the console's confirmation page whose form posts to it.
var postCases = map[string]func(t *testing.T, e *env) (confirm string){
	"POST /dead/apply": func(t *testing.T, e *env) string {
		ids := e.receive(t, "billing", "Invoice", "d-1", "d-2")
		e.kill(t, "boom", ids...)
		return "/dead/confirm?op=discard&scope=filter&consumer=billing"
	},
	"POST /pending/apply": func(t *testing.T, e *env) string {
		e.receive(t, "retired", "Old", "p-1", "p-2")
		return "/pending/confirm?consumer=retired"
	},
	"POST /outbox/dead/apply": func(t *testing.T, e *env) string {
		e.outboxDead(t, "no route", "orders", "orders")
		return "/outbox/dead/confirm?op=discard&scope=filter&topic=orders"
	},
	"POST /pause/apply": func(t *testing.T, e *env) string {
		return "/pause/confirm?op=pause&view=inbox&name=billing"
	},
}

// singleRoutes are the state-changing routes that change one named thing, not a counted set of
// rows: their confirmation carries no snapshot (TestEveryBulkRouteRequiresItsConfirmedSnapshot
// leaves them out).
var singleRoutes = map[string]bool{"POST /pause/apply": true}

// dump returns every row of every table of the schema, a line each ("table: row"), in a stable order.
func (e *env) dump(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	rows, err := e.Pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename`, e.Schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, tb := range tables {
		rows, err := e.Pool.Query(ctx, `SELECT x::text FROM `+pgx.Identifier{e.Schema, tb}.Sanitize()+` x ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			b.WriteString(tb + ": " + l + "\n")
		}
	}
	return b.String()
}

// Every route that changes something (every POST route of the router's list, so that a route added
// later is covered) refuses a request without the session's CSRF token, with a wrong token, with the
// token of another session or without its cookie, and a cross-site request with a valid token: 403,
// and not a row of the database changes. The same form with the token, same-site, does change them.
func TestEveryStateChangingRouteRequiresTheCSRFToken(t *testing.T) {
	t.Parallel()
	routes := stateChangingRoutes(t)
	if len(routes) == 0 {
		t.Fatal("the router lists no state-changing route")
	}
	for _, pattern := range routes {
		t.Run(strings.ReplaceAll(pattern, "/", "_"), func(t *testing.T) {
			t.Parallel()
			seed, ok := postCases[pattern]
			if !ok {
				t.Fatalf("no case for the state-changing route %q: add one to postCases", pattern)
			}
			method, path, _ := strings.Cut(pattern, " ")
			e := newEnv(t, console.Config{})
			confirm := seed(t, e)
			form := e.confirmForm(t, confirm)
			token := form.Get("csrf")
			otherToken := e.otherSession().confirmForm(t, confirm).Get("csrf")
			if otherToken == token {
				t.Fatal("two sessions got the same CSRF token")
			}
			// with is the form with csrf as its token.
			with := func(csrf string) url.Values {
				v := url.Values{}
				for k, x := range form {
					v[k] = append([]string(nil), x...)
				}
				v.Set("csrf", csrf)
				return v
			}
			noToken := with("")
			noToken.Del("csrf")
			type refusal struct {
				name    string
				form    url.Values
				cookie  bool              // send this session's cookie
				headers map[string]string // added to the request
			}
			refusals := []refusal{
				{"no token", noToken, true, nil},
				{"empty token", with(""), true, nil},
				{"wrong token", with(strings.Repeat("A", len(token))), true, nil},
				{"token of another session", with(otherToken), true, nil},
				{"token without its cookie", with(token), false, nil},
				{"cross-site (Sec-Fetch-Site)", with(token), true, map[string]string{"Sec-Fetch-Site": "cross-site"}},
				{"cross-site (Origin)", with(token), true, map[string]string{"Origin": "https://attacker.example"}},
			}
			before := e.dump(t)
			for _, r := range refusals {
				code, body := e.send(t, method, path, r.form, r.cookie, r.headers)
				if code != http.StatusForbidden || !strings.Contains(body, `id="error"`) {
					t.Errorf("%s %s, %s: %d, want 403 and the error page\n%s", method, path, r.name, code, body)
				}
				if after := e.dump(t); after != before {
					t.Fatalf("%s %s, %s: the database changed:\n%s", method, path, r.name, lineDiff(before, after))
				}
			}
			// The same form, with its token, same-site: the route does change these rows.
			code, body := e.send(t, method, path, with(token), true, map[string]string{"Sec-Fetch-Site": "same-origin"})
			if code != http.StatusOK {
				t.Fatalf("%s %s with the token: %d\n%s", method, path, code, body)
			}
			if e.dump(t) == before {
				t.Fatalf("%s %s with the token changed nothing: the case does not exercise the route", method, path)
			}
		})
	}
}

// lineDiff lists the lines of before missing from after (-) and the lines of after new to it (+).
func lineDiff(before, after string) string {
	count := map[string]int{}
	for _, l := range strings.Split(before, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(after, "\n") {
		count[l]--
	}
	var b strings.Builder
	for _, l := range strings.Split(before, "\n") {
		if count[l] > 0 {
			b.WriteString("- " + l + "\n")
			count[l]--
		}
	}
	for _, l := range strings.Split(after, "\n") {
		if count[l] < 0 {
			b.WriteString("+ " + l + "\n")
			count[l]++
		}
	}
	return b.String()
}

// otherSession returns e seen from another browser: a client without e's cookie.
func (e *env) otherSession() *env {
	o := *e
	o.hc = newClientOf(e)
	return &o
}

// send sends a form with method to path, with e's session cookie or none, and headers; it returns
// the status and the body.
func (e *env) send(t *testing.T, method, path string, form url.Values, cookie bool, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	hc := e.hc
	if !cookie {
		hc = newClientOf(e)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
