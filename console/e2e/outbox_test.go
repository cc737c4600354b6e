package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
)

// Dead outbox events: filter them, tick every row at once and replay them (the relay then sends
// each, under its event id), then discard the rest of the filter after a confirmation that states
// their count.
func TestOutboxDeadEventsReplayAndBulkDiscard(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, d := browser(t)
	refuse := func(topic, msg string) outbox.Message {
		return outbox.Message{Topic: topic, Payload: []byte(`{}`), Headers: map[string]string{"refuse": msg}}
	}
	timeouts := outboxtest.Publish(t, e.DB, refuse("orders", "timeout talking to the broker"), refuse("orders", "Timeout talking to the broker"))
	routes := outboxtest.Publish(t, e.DB, refuse("orders", "no route"), refuse("mail", "no route"))
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil)

	run(t, ctx, chromedp.Navigate(e.url+"/outbox"), chromedp.WaitVisible("#topics", chromedp.ByQuery),
		chromedp.Click(`#outbox-dead-link`, chromedp.ByQuery), chromedp.WaitVisible(`#outbox-filters`, chromedp.ByQuery),
		chromedp.SetValue(`#outbox-filters input[name=error]`, "TIMEOUT", chromedp.ByQuery),
		chromedp.Click(`#outbox-apply-filter`, chromedp.ByQuery),
		chromedp.WaitVisible(`#outbox-filters input[name=error][value="TIMEOUT"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#outbox-dead`, chromedp.ByQuery))
	if got := text(t, ctx, "#match-count"); got != "2" {
		t.Fatalf("matching %q, want 2", got)
	}
	var ticked int
	run(t, ctx, chromedp.Click(`#select-all`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('#outbox-dead input[name=id]:checked').length`, &ticked))
	if ticked != 2 {
		t.Fatalf("%d rows ticked by the select-all box, want 2", ticked)
	}
	run(t, ctx, chromedp.Click(`#outbox-replay-selected`, chromedp.ByQuery), chromedp.WaitVisible(`#confirm-count`, chromedp.ByQuery))
	if got := text(t, ctx, "#confirm-count"); got != "2" {
		t.Fatalf("replay confirmation counts %q, want 2 (every row ticked at once)", got)
	}
	run(t, ctx, chromedp.Click(`#confirm-button`, chromedp.ByQuery), chromedp.WaitVisible(`#result`, chromedp.ByQuery))
	outboxtest.Drain(t, e.DB, outboxtest.Fate(func(outbox.Event) error { return nil }), nil)
	for _, id := range timeouts {
		if n := e.count(t, `SELECT count(*) FROM {schema}.outbox WHERE id = $1 AND state = 'sent' AND attempts_started = 1`, id); n != 1 {
			t.Errorf("replayed event %d not sent on its first attempt after the replay", id)
		}
	}

	run(t, ctx, chromedp.Navigate(e.url+"/outbox/dead?topic=orders"), chromedp.WaitVisible(`#outbox-discard-all`, chromedp.ByQuery),
		chromedp.Click(`#outbox-discard-all`, chromedp.ByQuery), chromedp.WaitVisible(`#confirm-count`, chromedp.ByQuery))
	if got := text(t, ctx, "#confirm-count"); got != "1" {
		t.Fatalf("bulk discard confirmation counts %q, want 1", got)
	}
	run(t, ctx, chromedp.Click(`#confirm-button`, chromedp.ByQuery), chromedp.WaitVisible(`#result`, chromedp.ByQuery))
	if got := text(t, ctx, "#result"); !strings.Contains(got, "Discarded: 1") {
		t.Fatalf("result %q", got)
	}
	if n := e.count(t, `SELECT count(*) FROM {schema}.outbox WHERE id = $1`, routes[0]); n != 0 {
		t.Errorf("discarded event %d still stored", routes[0])
	}
	if n := e.count(t, `SELECT count(*) FROM {schema}.outbox WHERE id = $1 AND state = 'dead'`, routes[1]); n != 1 {
		t.Errorf("the dead event of another topic changed")
	}
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/outbox/event?id=%d", e.url, routes[1])), chromedp.WaitVisible("#event", chromedp.ByQuery))
	if got := text(t, ctx, "#e-state"); got != "dead" {
		t.Errorf("event page state %q, want dead", got)
	}
	if got := d.list(); len(got) > 0 {
		t.Fatalf("dialogs opened: %q", got)
	}
}
