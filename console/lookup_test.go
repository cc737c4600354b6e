package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
)

// cellOf returns the text of the cell of body whose id is id, its tags removed and unescaped.
func cellOf(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<td id="` + regexp.QuoteMeta(id) + `">(.*?)</td>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no cell %s in:\n%s", id, body)
	}
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
}

// The outbox event page finds an event by its id or by its event id (the UUID a consumer sees), in
// either case, and shows its kind and content type (their defaults: the topic, application/json); an
// event id no stored event has is a 404 naming it, and an id that is neither a 400.
func TestOutboxEventByEventID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	ids := outboxtest.Publish(t, e.DB,
		outbox.Message{Topic: "orders", Kind: "order.created", ContentType: "application/vnd.acme.order+json", Payload: []byte(`{}`),
			Headers: map[string]string{"refuse": "no route"}},
		outbox.Message{Topic: "mail", Payload: []byte(`{}`)})
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil)
	for i, want := range []struct{ kind, contentType string }{{"order.created", "application/vnd.acme.order+json"}, {"mail", "application/json"}} {
		code, byID := e.get(t, fmt.Sprintf("/outbox/event?id=%d", ids[i]))
		if code != http.StatusOK {
			t.Fatalf("GET /outbox/event?id=%d: %d\n%s", ids[i], code, byID)
		}
		if k, ct := cellOf(t, byID, "e-kind"), cellOf(t, byID, "e-content-type"); k != want.kind || ct != want.contentType {
			t.Errorf("event %d: kind %q, content type %q; want %q, %q", ids[i], k, ct, want.kind, want.contentType)
		}
		eventID := cellOf(t, byID, "e-event-id")
		for _, q := range []string{eventID, strings.ToUpper(eventID)} {
			code, body := e.get(t, "/outbox/event?id="+url.QueryEscape(q))
			if code != http.StatusOK || cellOf(t, body, "e-id") != fmt.Sprint(ids[i]) || cellOf(t, body, "e-event-id") != eventID ||
				cellOf(t, body, "e-kind") != want.kind || cellOf(t, body, "e-content-type") != want.contentType {
				t.Fatalf("GET /outbox/event?id=%s: %d\n%s", q, code, body)
			}
			if !strings.Contains(body, `<input name="id" value="`+q+`"`) {
				t.Errorf("GET /outbox/event?id=%s: the search box does not keep the id typed:\n%s", q, body)
			}
		}
	}
	const notStored = "5f0c6a52-3c1e-4b7a-9d2e-8a1b2c3d4e5f"
	code, body := e.get(t, "/outbox/event?id="+notStored)
	if code != http.StatusNotFound || !strings.Contains(body, `id="notfound"`) || !strings.Contains(body, "No outbox event has event id "+notStored) {
		t.Fatalf("GET /outbox/event?id=%s (not stored): %d\n%s", notStored, code, body)
	}
	for _, bad := range []string{"abc", "0", "-1", "5f0c6a523c1e4b7a9d2e8a1b2c3d4e5f", notStored + "0"} {
		code, body := e.get(t, "/outbox/event?id="+url.QueryEscape(bad))
		if code != http.StatusBadRequest || !strings.Contains(body, `id="error"`) || !strings.Contains(body, "is neither an outbox event") {
			t.Errorf("GET /outbox/event?id=%s: %d, want 400\n%s", bad, code, body)
		}
	}
	// The search form takes either: no numeric-only input.
	_, body = e.get(t, "/outbox/event")
	if !strings.Contains(body, `id="outbox-event-search"`) || strings.Contains(body, `inputmode="numeric"`) {
		t.Fatalf("the search form of /outbox/event:\n%s", body)
	}
}

// A message delivered as a CloudEvents event (headers ce-id and ce-source, as the adapters' sinks
// store them) names it on its page: "from event <id> of <source>", as text (another service's
// database: no link); a message without them names none.
func TestMessageNamesTheUpstreamEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	const eventID, source = "0190a8c2-6a1b-7c3d-9e4f-0123456789ab", "/txinbox/orders"
	r, err := e.c.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: eventID, Kind: "order.created", Payload: []byte(`{}`),
		Headers: map[string]string{"ce-id": eventID, "ce-source": source}})
	if err != nil {
		t.Fatal(err)
	}
	code, body := e.get(t, fmt.Sprintf("/message?id=%d", r.ID))
	if code != http.StatusOK {
		t.Fatalf("GET /message: %d\n%s", code, body)
	}
	if got := cellOf(t, body, "m-upstream"); got != "from event "+eventID+" of "+source {
		t.Fatalf("upstream cell %q, want %q", got, "from event "+eventID+" of "+source)
	}
	if m := regexp.MustCompile(`(?s)<td id="m-upstream">.*?</td>`).FindString(body); strings.Contains(m, "<a ") {
		t.Fatalf("the upstream event is a link: %s", m)
	}
	plain := e.receive(t, "ledger", "order.created", "k")
	if _, body := e.get(t, fmt.Sprintf("/message?id=%d", plain[0])); strings.Contains(body, `id="m-upstream"`) {
		t.Fatalf("page of a message without ce- headers names an upstream event:\n%s", body)
	}
}
