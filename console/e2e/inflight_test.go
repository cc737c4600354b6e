package e2e

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/worker"
)

// The overview's Retrying count links to the consumer's retrying messages; the list shows the one
// whose handler failed, and its page shows the failed attempt in its history.
func TestRetryingListAndAttemptHistory(t *testing.T) {
	e := newEnv(t, console.Config{})
	ctx, _ := browser(t)
	ids := e.receive(t, "billing", "b-1")
	e.receive(t, "billing", "b-2")
	hs := worker.NewHandlers()
	worker.Handle(hs, "Invoice", func(context.Context, pgx.Tx, *worker.Message[invoice]) error {
		return errors.New("card declined by the bank")
	})
	st := e.Store()
	st.Logger = slog.New(slog.DiscardHandler)
	p, err := worker.New(st, worker.Config{Consumer: "billing", Handlers: hs, PollInterval: 20 * time.Millisecond, Owner: "e2e-pool",
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return time.Hour })})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both messages to fail once", func() bool {
		return e.count(t, `SELECT count(*) FROM {schema}.inbox WHERE attempts_failed = 1`) == 2
	})
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = p.Stop(sctx)
	cancel()

	run(t, ctx, chromedp.Navigate(e.url+"/"), chromedp.WaitVisible("#consumers", chromedp.ByQuery))
	if got := text(t, ctx, `tr[data-consumer="billing"] td.retrying`); got != "2" {
		t.Fatalf("billing retrying = %q, want 2", got)
	}
	run(t, ctx, chromedp.Click(`tr[data-consumer="billing"] td.retrying a`, chromedp.ByQuery),
		chromedp.WaitVisible("#inflight", chromedp.ByQuery))
	var n int
	run(t, ctx, chromedp.Evaluate(`document.querySelectorAll('#inflight tbody tr[data-state="retrying"]').length`, &n))
	if n != 2 {
		t.Fatalf("%d retrying rows listed, want 2", n)
	}
	if got := text(t, ctx, "#inflight"); !strings.Contains(got, "card declined by the bank") || !strings.Contains(got, "b-1") {
		t.Errorf("retrying list: %q", got)
	}
	run(t, ctx, chromedp.Click(`#inflight tr[data-id="`+itoa(ids[0])+`"] a`, chromedp.ByQuery),
		chromedp.WaitVisible("#m-history", chromedp.ByQuery))
	if got := text(t, ctx, "#m-id"); got != itoa(ids[0]) {
		t.Errorf("message page of %q, want %d", got, ids[0])
	}
	h := text(t, ctx, "#m-history")
	for _, want := range []string{"card declined by the bank", "error", "e2e-pool"} {
		if !strings.Contains(h, want) {
			t.Errorf("attempt history lacks %q: %q", want, h)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
