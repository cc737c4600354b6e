package e2e

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
)

// minContrast is WCAG 2's minimum contrast ratio of normal text (success criterion 1.4.3, level AA).
const minContrast = 4.5

// controlsJS measures every rendered button and link of the page: buttons (button, input buttons,
// role=button) and links (a[href], those styled as buttons included). For each it returns the text
// colour and the effective background: the background colours of the element and of its ancestors
// composited over white (the canvas), the text colour composited over that, and both composited with
// the element's opacity (the product of its own and its ancestors') over the background behind it.
// Disabled controls are left out (WCAG exempts inactive controls). A colour that is not rgb()/rgba()
// is reported as unparsed.
const controlsJS = `(() => {
  const parse = (c) => {
    const m = /^rgba?\(([^)]*)\)$/.exec(c.trim());
    if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    if (p.length < 3 || p.some(Number.isNaN)) return null;
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, under) => [0, 1, 2].map(i => top[3] * top[i] + (1 - top[3]) * under[i]).concat([1]);
  const out = [];
  const sel = 'button, input[type=submit], input[type=button], input[type=reset], [role=button], a[href]';
  for (const el of document.querySelectorAll(sel)) {
    if (el.disabled || el.getClientRects().length === 0) continue;
    const chain = [];
    let opacity = 1, unparsed = "";
    for (let n = el; n && n.nodeType === 1; n = n.parentElement) {
      const cs = getComputedStyle(n);
      const bg = parse(cs.backgroundColor);
      if (!bg) unparsed = cs.backgroundColor;
      chain.push(bg || [255, 255, 255, 0]);
      opacity *= Number(cs.opacity);
    }
    let behind = [255, 255, 255, 1];
    for (let i = chain.length - 1; i >= 1; i--) behind = over(chain[i], behind);
    const bg = over(chain[0], behind);
    const fgRaw = parse(getComputedStyle(el).color);
    if (!fgRaw) unparsed = getComputedStyle(el).color;
    let fg = over(fgRaw || [0, 0, 0, 1], bg);
    const shown = (c) => over([c[0], c[1], c[2], opacity], behind);
    const label = (el.innerText || el.value || el.getAttribute("aria-label") || "").trim().replace(/\s+/g, " ").slice(0, 60);
    out.push({
      id: el.id,
      name: el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + [...el.classList].map(c => "." + c).join("") + ' "' + label + '"',
      fg: shown(fg).slice(0, 3), bg: shown(bg).slice(0, 3),
      color: getComputedStyle(el).color, background: getComputedStyle(el).backgroundColor, unparsed: unparsed,
    });
  }
  return out;
})()`

// control is what controlsJS reports of one element.
type control struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Fg         []float64 `json:"fg"` // effective text colour, sRGB 0..255
	Bg         []float64 `json:"bg"` // effective background colour
	Color      string    `json:"color"`
	Background string    `json:"background"`
	Unparsed   string    `json:"unparsed"`
}

// luminance is the WCAG 2 relative luminance of an sRGB colour (channels 0..255).
func luminance(c []float64) float64 {
	lin := func(v float64) float64 {
		v /= 255
		if v <= 0.04045 {
			return v / 12.92
		}
		return math.Pow((v+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(c[0]) + 0.7152*lin(c[1]) + 0.0722*lin(c[2])
}

// contrast is the WCAG 2 contrast ratio of two colours, from 1 to 21.
func contrast(a, b []float64) float64 {
	la, lb := luminance(a), luminance(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// contrast gives WCAG's figures: 21:1 for black on white, 1:1 for a colour on itself, 4.54:1 for
// #767676 on white.
func TestContrastFormula(t *testing.T) {
	for _, c := range []struct {
		a, b []float64
		want float64
	}{
		{[]float64{0, 0, 0}, []float64{255, 255, 255}, 21},
		{[]float64{255, 255, 255}, []float64{255, 255, 255}, 1},
		{[]float64{118, 118, 118}, []float64{255, 255, 255}, 4.54}, // #767676: the lightest grey that passes on white
	} {
		if got := contrast(c.a, c.b); math.Abs(got-c.want) > 0.01 {
			t.Errorf("contrast(%v, %v) = %.3f, want %.2f", c.a, c.b, got, c.want)
		}
	}
}

// pageMarks identifies the page of each template of the console by an element only it renders; the
// test fails if a template has no mark here, or if no page it visits shows it.
var pageMarks = map[string]string{
	"overview": "#tables",
	"message":  "form.search",
	"dead":     "#filters",
	"confirm":  "#confirm",
	"result":   "#result",
	"error":    "#error",
	// The outbox's pages.
	"outbox":       "#topics",
	"outbox_dead":  "#outbox-filters",
	"outbox_event": "#outbox-event-search",
	"pause":        "#pause-text",
	// The queued work of a consumer or a topic.
	"inflight": "table#inflight",
}

// Every button and link of every page of the console (seeded so that every action is offered: dead
// letters, pending messages of a consumer, a dead letter's message page, confirmations, a result and
// an error page) has a contrast ratio of at least 4.5:1 between its text colour and its effective
// background, as Chromium computes them.
func TestButtonsAndLinksContrast(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, _ := browser(t)
	dead := e.receive(t, "billing", "c-1", "c-2")
	if _, err := e.Pool.Exec(t.Context(), e.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = ANY($1))
		UPDATE {schema}.inbox SET state = 'dead', last_error = 'card declined', completed_at = now() WHERE id = ANY($1)`), dead); err != nil {
		t.Fatal(err)
	}
	e.receive(t, "retired", "p-1", "p-2")
	// Outbox events: two dead (refused), one sent, one retrying.
	deadEvents := outboxtest.Publish(t, e.DB,
		outbox.Message{Topic: "orders", Key: "o-1", Payload: []byte(`{"n":1}`), Headers: map[string]string{"refuse": "no route"}},
		outbox.Message{Topic: "orders", Key: "o-2", Payload: []byte(`{"n":2}`), Headers: map[string]string{"refuse": "no route"}},
		outbox.Message{Topic: "mail", Payload: []byte(`{}`)},
		outbox.Message{Topic: "mail", Payload: []byte(`{}`), Headers: map[string]string{"fail": "broker down"}})
	outboxtest.Drain(t, e.DB, outboxtest.ByHeaders, nil)
	// A paused consumer: its badge and Resume… link on the overview.
	if _, err := e.Pool.Exec(t.Context(), e.SQL(`INSERT INTO {schema}.inbox_paused (consumer, paused_by, reason) VALUES ('retired', 'e2e', 'retiring')`)); err != nil {
		t.Fatal(err)
	}

	templates, err := filepath.Glob(filepath.Join("..", "templates", "*.html"))
	if err != nil || len(templates) == 0 {
		t.Fatalf("no templates in ../templates: %v", err)
	}
	seenPage := map[string]bool{}
	var seenIDs []string
	measure := func(what string) {
		t.Helper()
		var got []control
		run(t, ctx, chromedp.WaitVisible("main", chromedp.ByQuery), chromedp.Evaluate(controlsJS, &got))
		if len(got) == 0 {
			t.Errorf("%s: no button or link measured", what)
		}
		for _, c := range got {
			if c.Unparsed != "" {
				t.Errorf("%s: %s: colour %q not understood by the test", what, c.Name, c.Unparsed)
				continue
			}
			if r := contrast(c.Fg, c.Bg); r < minContrast {
				t.Errorf("%s: %s: contrast %.2f:1, want at least %.1f:1 (text %s on %s; effective text rgb%v on rgb%v)",
					what, c.Name, r, minContrast, c.Color, c.Background, rounded(c.Fg), rounded(c.Bg))
			}
			if c.ID != "" {
				seenIDs = append(seenIDs, c.ID)
			}
		}
		for name, sel := range pageMarks {
			var n int
			run(t, ctx, chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n))
			if n > 0 {
				seenPage[name] = true
			}
		}
	}
	pages := []string{
		"/",
		"/dead",
		fmt.Sprintf("/message?id=%d", dead[0]),
		"/message",
		fmt.Sprintf("/dead/confirm?op=discard&scope=selected&id=%d", dead[0]),
		"/dead/confirm?op=replay&scope=filter",
		"/pending/confirm?consumer=retired",
		"/message?id=not-a-number",
		"/outbox",
		"/outbox/dead",
		fmt.Sprintf("/outbox/event?id=%d", deadEvents[0]),
		"/outbox/event",
		fmt.Sprintf("/outbox/dead/confirm?op=discard&scope=selected&id=%d", deadEvents[0]),
		"/outbox/dead/confirm?op=replay&scope=filter",
		"/inflight?consumer=retired",
		"/outbox/inflight",
		"/pause/confirm?op=pause&view=inbox&name=billing",
		"/pause/confirm?op=resume&view=inbox&name=retired",
		"/pause/confirm?op=pause&view=outbox&name=orders",
	}
	for _, p := range pages {
		run(t, ctx, chromedp.Navigate(e.url+p))
		measure("GET " + p)
	}
	// A result page: replay one dead letter from its confirmation.
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/dead/confirm?op=replay&scope=selected&id=%d", e.url, dead[1])),
		chromedp.WaitVisible("#confirm-button", chromedp.ByQuery), chromedp.Click("#confirm-button", chromedp.ByQuery),
		chromedp.WaitVisible("#result", chromedp.ByQuery))
	measure("the result of a replay")
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/outbox/dead/confirm?op=replay&scope=selected&id=%d", e.url, deadEvents[1])),
		chromedp.WaitVisible("#confirm-button", chromedp.ByQuery), chromedp.Click("#confirm-button", chromedp.ByQuery),
		chromedp.WaitVisible("#result", chromedp.ByQuery))
	measure("the result of an outbox replay")

	for _, path := range templates {
		name := strings.TrimSuffix(filepath.Base(path), ".html")
		if name == "layout" {
			continue
		}
		if _, ok := pageMarks[name]; !ok {
			t.Errorf("template %s has no mark in pageMarks: add one, and a page of it to the test", name)
		} else if !seenPage[name] {
			t.Errorf("no page visited shows template %s", name)
		}
	}
	for _, id := range []string{"apply-filter", "replay-selected", "discard-selected", "replay-all", "discard-all",
		"replay-one", "discard-one", "confirm-button", "outbox-apply-filter", "outbox-replay-selected", "outbox-discard-selected",
		"outbox-replay-all", "outbox-discard-all", "outbox-replay-one", "outbox-discard-one", "outbox-dead-link"} {
		if !slices.Contains(seenIDs, id) {
			t.Errorf("no page showed #%s: the data does not offer every action", id)
		}
	}
}

func rounded(c []float64) []int {
	out := make([]int, len(c))
	for i, v := range c {
		out[i] = int(math.Round(v))
	}
	return out
}
