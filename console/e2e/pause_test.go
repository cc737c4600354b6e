package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/console"
)

// At 1280 px wide, with every column of the overview's consumer table in use (pending messages, so
// the "Discard pending…" link; a paused consumer, so its badge and "Resume…"; the chart), the table
// fits the window and no header wraps: every th's text is one line.
func TestOverviewFits1280WithoutWrappedHeaders(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, _ := browser(t)
	e.receive(t, "billing.invoices-eu", "b-1", "b-2")
	e.receive(t, "shipping", "s-1")
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`INSERT INTO {schema}.inbox_rollup (consumer, minute, completed, failed, dead)
		SELECT 'shipping', date_trunc('minute', now()) - make_interval(mins => g), 1000 + g, g % 7, g % 3
		FROM generate_series(1, 59) g`)); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pause(context.Background(), admin.Inbox, "billing.invoices-eu", "e2e", "invoice API down"); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(e.url+"/"), chromedp.WaitVisible("#consumers", chromedp.ByQuery))
	var res struct {
		Right, Width float64
		Wrapped      []string
	}
	run(t, ctx, chromedp.Evaluate(`(() => {
		const t = document.querySelector('#consumers');
		const wrapped = [];
		for (const th of t.querySelectorAll('th')) {
			const r = document.createRange();
			r.selectNodeContents(th);
			const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
			if (tops.size > 1) wrapped.push(th.textContent + ' (' + tops.size + ' lines)');
		}
		return {Right: t.getBoundingClientRect().right, Width: document.documentElement.clientWidth, Wrapped: wrapped};
	})()`, &res))
	t.Logf("the consumer table ends at %.0f px of %.0f", res.Right, res.Width)
	if len(res.Wrapped) > 0 {
		t.Errorf("headers wrap at 1280 px: %s", strings.Join(res.Wrapped, ", "))
	}
	if res.Right > res.Width {
		t.Errorf("the consumer table ends at %.0f px, past the window's %.0f px", res.Right, res.Width)
	}
}

// A consumer paused through admin shows a "paused" badge on its row of the overview, with who paused
// it and why in its title, and in the overview's list of pauses; resumed, the badge goes.
func TestPauseShowsOnTheOverview(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, _ := browser(t)
	e.receive(t, "billing", "b-1")
	e.receive(t, "shipping", "s-1")
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pause(context.Background(), admin.Inbox, "billing", "alice", "invoice API down"); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(e.url+"/"), chromedp.WaitVisible(`tr[data-consumer="billing"] .badge.paused`, chromedp.ByQuery))
	if got := text(t, ctx, `tr[data-consumer="billing"] .badge.paused`); got != "paused" {
		t.Errorf("billing's badge reads %q", got)
	}
	var title string
	var ok bool
	run(t, ctx, chromedp.AttributeValue(`tr[data-consumer="billing"] .badge.paused`, "title", &title, &ok, chromedp.ByQuery))
	if !strings.Contains(title, "by alice: invoice API down") {
		t.Errorf("the badge's title is %q", title)
	}
	var others int
	run(t, ctx, chromedp.Evaluate(`document.querySelectorAll('tr[data-consumer="shipping"] .badge').length`, &others))
	if others != 0 {
		t.Errorf("shipping's row has a badge")
	}
	if got := text(t, ctx, `tr[data-paused="inbox/billing"]`); !strings.Contains(got, "alice") || !strings.Contains(got, "invoice API down") {
		t.Errorf("the list of pauses reads %q", got)
	}
	// Resume from the page: its link, the confirmation, the button.
	run(t, ctx, chromedp.Click(`tr[data-consumer="billing"] a.resume`, chromedp.ByQuery), chromedp.WaitVisible("#confirm-button", chromedp.ByQuery),
		chromedp.Click("#confirm-button", chromedp.ByQuery), chromedp.WaitVisible("#result", chromedp.ByQuery),
		chromedp.Navigate(e.url+"/"), chromedp.WaitVisible("#consumers", chromedp.ByQuery))
	var badges int
	run(t, ctx, chromedp.Evaluate(`document.querySelectorAll('.badge.paused').length`, &badges))
	if badges != 0 {
		t.Errorf("%d paused badges after resuming", badges)
	}
	if ps, err := a.ListPaused(context.Background()); err != nil || len(ps) != 0 {
		t.Errorf("after resuming from the console: %+v, %v", ps, err)
	}
}
