package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/console"
)

// Pausing a consumer and a topic from the console, through the confirmation page and its form, pauses
// them in admin (by "console", with the reason typed); the overview's consumer row and the outbox
// page's topic row then carry a "paused" badge saying who and why, and the overview lists both
// pauses. Resuming from the console ends them, and the badges go.
func TestPauseAndResumeFromTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	e.receive(t, "billing", "Invoice", "p-1")
	e.receive(t, "shipping", "Parcel", "s-1")
	e.outboxDead(t, "no route", "orders")
	sameSite := map[string]string{"Sec-Fetch-Site": "same-origin"}
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	badge := regexp.MustCompile(`<span class="badge paused" title="paused since [^"]+ by console: ([^"]*)">paused</span>`)
	row := func(body, attr, name string) string {
		m := regexp.MustCompile(`(?s)<tr ` + attr + `="` + regexp.QuoteMeta(name) + `">(.*?)</tr>`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no row %s=%s in:\n%s", attr, name, body)
		}
		return m[1]
	}
	for _, c := range []struct{ view, name, reason string }{{"inbox", "billing", "ledger API down"}, {"outbox", "orders", "broker & co"}} {
		form := e.confirmForm(t, "/pause/confirm?op=pause&view="+c.view+"&name="+c.name)
		if form.Get("op") != "pause" || form.Get("view") != c.view || form.Get("name") != c.name {
			t.Fatalf("the pause form: %v", form)
		}
		form.Set("reason", c.reason)
		code, body := e.send(t, http.MethodPost, "/pause/apply", form, true, sameSite)
		if code != http.StatusOK || !strings.Contains(body, "Paused ") {
			t.Fatalf("POST /pause/apply %s: %d\n%s", c.name, code, body)
		}
	}
	ps, err := a.ListPaused(context.Background())
	if err != nil || len(ps) != 2 || ps[0].Name != "billing" || ps[0].By != "console" || ps[0].Reason != "ledger API down" ||
		ps[1].View != admin.Outbox || ps[1].Name != "orders" || ps[1].Reason != "broker & co" {
		t.Fatalf("admin.ListPaused = %+v, %v", ps, err)
	}

	_, body := e.get(t, "/")
	if m := badge.FindStringSubmatch(row(body, "data-consumer", "billing")); m == nil || m[1] != "ledger API down" {
		t.Errorf("billing's row has no paused badge naming the reason:\n%s", row(body, "data-consumer", "billing"))
	}
	if strings.Contains(row(body, "data-consumer", "shipping"), "paused") {
		t.Errorf("shipping's row says paused:\n%s", row(body, "data-consumer", "shipping"))
	}
	for _, p := range []string{"inbox/billing", "outbox/orders"} {
		if !strings.Contains(row(body, "data-paused", p), `href="/pause/confirm?op=resume&amp;view=`+strings.Replace(p, "/", "&amp;name=", 1)+`"`) {
			t.Errorf("the overview's list of pauses has no resume link for %s:\n%s", p, body)
		}
	}
	_, body = e.get(t, "/outbox")
	if m := badge.FindStringSubmatch(row(body, "data-topic", "orders")); m == nil || m[1] != "broker &amp; co" {
		t.Errorf("orders' row has no paused badge naming the reason:\n%s", row(body, "data-topic", "orders"))
	}

	// Pausing again offers nothing to confirm; resuming does.
	if _, body := e.get(t, "/pause/confirm?op=pause&view=inbox&name=billing"); strings.Contains(body, "confirm-form") || !strings.Contains(body, "is paused already") {
		t.Errorf("pausing a paused consumer offers a form:\n%s", body)
	}
	for _, c := range []struct{ view, name string }{{"inbox", "billing"}, {"outbox", "orders"}} {
		form := e.confirmForm(t, "/pause/confirm?op=resume&view="+c.view+"&name="+c.name)
		code, body := e.send(t, http.MethodPost, "/pause/apply", form, true, sameSite)
		if code != http.StatusOK || !strings.Contains(body, "Resumed ") {
			t.Fatalf("resume %s: %d\n%s", c.name, code, body)
		}
	}
	if ps, err := a.ListPaused(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("after resuming: %+v, %v", ps, err)
	}
	if _, body := e.get(t, "/"); strings.Contains(body, "badge paused") || strings.Contains(body, `id="paused"`) {
		t.Errorf("the overview still shows a pause:\n%s", body)
	}

	// A name admin refuses: 400 naming why, nothing paused.
	form := e.confirmForm(t, "/pause/confirm?op=pause&view=inbox&name=bad+name")
	if code, body := e.send(t, http.MethodPost, "/pause/apply", form, true, sameSite); code != http.StatusBadRequest || !strings.Contains(body, "consumer") {
		t.Errorf("pausing consumer %q: %d\n%s", "bad name", code, body)
	}
	if ps, err := a.ListPaused(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("after a refused pause: %+v, %v", ps, err)
	}
}
