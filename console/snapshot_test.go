package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/console"
)

// Every state-changing route (the router's list, so that a route added later is covered) but those
// that change one named thing (singleRoutes, whose forms carry no count, scope or id) acts on
// rows bound by the snapshot its confirmation counted: the form of its confirmation page (postCases:
// the bulk form, scope filter where the route has scopes) carries that snapshot, and a request with
// the session's CSRF token, same-site, but without the snapshot, with an empty one or with a tampered
// one is refused with 400, and not a row of the database changes. The untouched form does change them.
func TestEveryBulkRouteRequiresItsConfirmedSnapshot(t *testing.T) {
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
			form := e.confirmForm(t, seed(t, e))
			if singleRoutes[pattern] {
				if form.Has("count") || form.Has("scope") || form.Has("id") {
					t.Fatalf("%s is listed in singleRoutes but its form acts on a set: %v", pattern, form)
				}
				return // changes one named thing: no snapshot to check (and no skip: a skipped test judges no mutant)
			}
			snapshot := form.Get("snapshot")
			if snapshot == "" || len(form["snapshot"]) != 1 {
				t.Fatalf("the confirmation form of %s carries no snapshot (or several): %v", pattern, form)
			}
			if s := form.Get("scope"); s != "" && s != "filter" && s != "pending" {
				t.Fatalf("the confirmation form of %s has scope %q: postCases must give the bulk form", pattern, s)
			}
			// with is the form with its snapshot values set to snap (none: the field left out).
			with := func(snap ...string) url.Values {
				v := url.Values{}
				for k, x := range form {
					v[k] = append([]string(nil), x...)
				}
				v.Del("snapshot")
				for _, s := range snap {
					v.Add("snapshot", s)
				}
				return v
			}
			refusals := []struct {
				name string
				form url.Values
			}{
				{"no snapshot", with()},
				{"empty snapshot", with("")},
				{"snapshot with a letter appended", with(snapshot + "x")},
				{"snapshot with a space before it", with(" " + snapshot)},
				{"a word", with("latest")},
				{"zero", with("0")},
				{"negative", with("-1")},
			}
			sameSite := map[string]string{"Sec-Fetch-Site": "same-origin"}
			before := e.dump(t)
			for _, r := range refusals {
				code, body := e.send(t, method, path, r.form, true, sameSite)
				if code != http.StatusBadRequest || !strings.Contains(body, `id="error"`) || !strings.Contains(body, "snapshot") {
					t.Errorf("%s %s, %s: %d, want 400 and the error page naming the snapshot\n%s", method, path, r.name, code, body)
				}
				if after := e.dump(t); after != before {
					t.Fatalf("%s %s, %s: the database changed:\n%s", method, path, r.name, lineDiff(before, after))
				}
			}
			code, body := e.send(t, method, path, with(snapshot), true, sameSite)
			if code != http.StatusOK {
				t.Fatalf("%s %s with its snapshot: %d\n%s", method, path, code, body)
			}
			if e.dump(t) == before {
				t.Fatalf("%s %s with its snapshot changed nothing: the case does not exercise the route", method, path)
			}
		})
	}
}
