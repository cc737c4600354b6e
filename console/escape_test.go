package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/console"
)

// hostile is markup that breaks out of an attribute (either quote) and of text.
const hostile = `"'><script>alert(1)</script><img src=x onerror=alert(2)>`

// hostileShown is how hostile (or its Go quoting, which keeps < and >) reads once escaped.
const hostileShown = `&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;`

// rawMarkupRE finds an element made from input: every page's only script is the layout's, which is
// cut out before the search.
var rawMarkupRE = regexp.MustCompile(`(?i)<\s*/?\s*(script|img|iframe)`)

// routeInputs is what a route reads: params are its parameters; bases are valid requests, so that
// hostile input in one parameter of them reaches the route's error page for that parameter (or the
// page it renders); reflected names the parameters whose value an error page (or the message page's
// "not found") quotes: for those the escaped value must be on the page.
type routeInputs struct {
	bases     []url.Values
	params    []string
	reflected []string
}

// inputsOf returns the inputs of every route of the router, by pattern, with dead the id of a dead
// letter and deadEvent the id of a dead outbox event.
func inputsOf(dead, deadEvent int64) map[string]routeInputs {
	deadFilter := []string{"consumer", "kind", "error", "since", "until"}
	outboxFilter := []string{"topic", "key", "error", "since", "until"}
	return map[string]routeInputs{
		"GET /static/": {},
		"GET /{$}":     {params: []string{"x"}},
		"GET /message": {bases: []url.Values{{"consumer": {"billing"}, "key": {"nope"}}},
			params: []string{"id", "consumer", "key"}, reflected: []string{"id", "consumer", "key"}},
		"GET /dead": {bases: []url.Values{{}},
			params: append([]string{"before"}, deadFilter...), reflected: []string{"before", "since", "until"}},
		"GET /dead/confirm": {
			bases: []url.Values{{"op": {"replay"}, "scope": {"selected"}, "id": {fmt.Sprint(dead)}},
				{"op": {"discard"}, "scope": {"filter"}}},
			params: append([]string{"op", "scope", "id"}, deadFilter...), reflected: []string{"id", "since", "until"}},
		"POST /dead/apply": {
			bases: []url.Values{{"op": {"replay"}, "scope": {"selected"}, "id": {"999999999"}, "count": {"1"}},
				{"op": {"replay"}, "scope": {"filter"}, "count": {"1"}, "snapshot": {"1"}}},
			params:    append([]string{"op", "scope", "id", "count", "snapshot"}, deadFilter...),
			reflected: []string{"id", "since", "until", "snapshot"}},
		"GET /pending/confirm": {bases: []url.Values{{"consumer": {"billing"}}}, params: []string{"consumer"}},
		"POST /pending/apply": {bases: []url.Values{{"consumer": {"billing"}, "count": {"0"}, "snapshot": {"1"}}},
			params: []string{"consumer", "count", "snapshot"}, reflected: []string{"snapshot"}},
		"GET /outbox": {params: []string{"x"}},
		"GET /outbox/dead": {bases: []url.Values{{}},
			params: append([]string{"before"}, outboxFilter...), reflected: []string{"before", "since", "until"}},
		"GET /outbox/dead/confirm": {
			bases: []url.Values{{"op": {"replay"}, "scope": {"selected"}, "id": {fmt.Sprint(deadEvent)}},
				{"op": {"discard"}, "scope": {"filter"}}},
			params: append([]string{"op", "scope", "id"}, outboxFilter...), reflected: []string{"id", "since", "until"}},
		"POST /outbox/dead/apply": {
			bases: []url.Values{{"op": {"replay"}, "scope": {"selected"}, "id": {"999999999"}, "count": {"1"}},
				{"op": {"replay"}, "scope": {"filter"}, "count": {"1"}, "snapshot": {"1:1"}}},
			params:    append([]string{"op", "scope", "id", "count", "snapshot"}, outboxFilter...),
			reflected: []string{"id", "since", "until", "snapshot"}},
		"GET /inflight": {bases: []url.Values{{}}, params: []string{"consumer", "state", "before"},
			reflected: []string{"state", "before"}},
		"GET /outbox/inflight": {bases: []url.Values{{}}, params: []string{"topic", "state", "before"},
			reflected: []string{"state", "before"}},
		"GET /outbox/event": {bases: []url.Values{{"id": {"999999999"}}}, params: []string{"id"}, reflected: []string{"id"}},
		"GET /pause/confirm": {bases: []url.Values{{"op": {"pause"}, "view": {"inbox"}, "name": {"billing"}},
			{"op": {"resume"}, "view": {"outbox"}, "name": {"orders"}}}, params: []string{"op", "view", "name"}},
		"POST /pause/apply": {bases: []url.Values{{"op": {"pause"}, "view": {"inbox"}, "name": {"billing"}, "reason": {"r"}},
			{"op": {"resume"}, "view": {"outbox"}, "name": {"orders"}}}, params: []string{"op", "view", "name", "reason"}},
	}
}

// Hostile input in every parameter of every route of the router (alone, and in an otherwise valid
// request), in paths that match no route, and in the forms of refused POSTs renders as text: no
// page, error pages included, holds markup made from it, and where an error page quotes the value it
// is there escaped.
func TestErrorPagesEscapeHostileInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	dead := e.receive(t, "billing", "Invoice", "a")
	e.kill(t, "boom", dead...)
	e.receive(t, "billing", "Invoice", "b")
	deadEvent := e.outboxDead(t, "no route", "orders")
	token := e.confirmForm(t, "/pending/confirm?consumer=billing").Get("csrf")
	layoutScript := `<script src="/static/console.js" defer></script>`

	check := func(t *testing.T, what string, code int, body string) bool {
		t.Helper()
		if !strings.Contains(body, layoutScript) && strings.Contains(body, "<html") {
			t.Errorf("%s: the layout's script tag is not where it was: update the test", what)
		}
		if m := rawMarkupRE.FindString(strings.Replace(body, layoutScript, "", 1)); m != "" {
			t.Errorf("%s: %d, markup %q made from input:\n%s", what, code, m, body)
		}
		return strings.Contains(body, hostileShown) && (strings.Contains(body, `id="error"`) || strings.Contains(body, `id="notfound"`))
	}
	do := func(t *testing.T, method, path string, v url.Values, csrf bool) (int, string) {
		t.Helper()
		if method == http.MethodGet {
			return e.get(t, path+"?"+v.Encode())
		}
		form := url.Values{}
		for k, x := range v {
			form[k] = x
		}
		if csrf {
			form.Set("csrf", token)
		}
		return e.send(t, method, path, form, true, nil)
	}

	inputs := inputsOf(dead[0], deadEvent[0])
	for _, pattern := range console.Routes() {
		in, ok := inputs[pattern]
		if !ok {
			t.Errorf("no inputs for the route %q: add them to inputsOf", pattern)
			continue
		}
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.TrimSuffix(path, "{$}")
		shown := map[string]bool{}
		for _, p := range in.params {
			// The parameter alone, then in each otherwise valid request.
			for _, base := range append([]url.Values{{}}, in.bases...) {
				v := url.Values{}
				for k, x := range base {
					v[k] = append([]string(nil), x...)
				}
				v.Set(p, hostile)
				code, body := do(t, method, path, v, true)
				if check(t, fmt.Sprintf("%s %s %s", method, path, v.Encode()), code, body) {
					shown[p] = true
				}
			}
		}
		for _, p := range in.reflected {
			if !shown[p] {
				t.Errorf("%s: hostile %s was never quoted, escaped, by an error page: the test does not reach it", pattern, p)
			}
		}
		// Every parameter hostile at once, and a refused POST (no token) carrying them.
		all := url.Values{}
		for _, p := range in.params {
			all.Set(p, hostile)
		}
		code, body := do(t, method, path, all, true)
		check(t, fmt.Sprintf("%s %s, every parameter hostile", method, path), code, body)
		if method == http.MethodPost {
			code, body := do(t, method, path, all, false)
			if code != http.StatusForbidden {
				t.Errorf("%s %s without a token: %d, want 403", method, path, code)
			}
			check(t, fmt.Sprintf("%s %s without a token", method, path), code, body)
		}
	}
	// Paths that match no route, or no file.
	for _, p := range []string{"/" + url.PathEscape(hostile), "/static/" + url.PathEscape(hostile), "/dead/" + url.PathEscape(hostile),
		"/message/" + url.PathEscape(hostile) + "?id=" + url.QueryEscape(hostile), "/outbox/" + url.PathEscape(hostile)} {
		code, body := e.get(t, p)
		check(t, "GET "+p, code, body)
	}
}
