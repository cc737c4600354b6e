package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/txinbox/txinbox/examples/ledger/internal/api"
)

func event(id, account string, amount int64) string {
	return fmt.Sprintf(`{"event_id":%q,"order_id":"ord-%s","account_id":%q,"amount_cents":%d,"occurred_at":"2026-11-22T10:00:00Z"}`,
		id, id, account, amount)
}

func TestEventsDuplicatesConflictsAndBalances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)

	// The same event delivered many times, concurrently, some in another layout: one 202, the rest 200.
	alt := `{ "occurred_at": "2026-11-22T11:00:00+01:00", "amount_cents": 1500,
	          "account_id": "acct-1", "order_id": "ord-e1", "event_id": "e1" }`
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			body := event("e1", "acct-1", 1500)
			if i%2 == 1 {
				body = alt // same instant, other offset, other order and spacing: the same event
			}
			r := e.do(t, "POST", "/v1/events", body)
			mu.Lock()
			statuses[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[http.StatusAccepted] != 1 || statuses[http.StatusOK] != 19 {
		t.Fatalf("statuses = %v, want one 202 and nineteen 200", statuses)
	}

	for i := range 10 {
		for range 3 {
			r := e.do(t, "POST", "/v1/events", event(fmt.Sprintf("e-%d", i), fmt.Sprintf("acct-%d", i%3), 100))
			if r.status != http.StatusAccepted && r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
		}
	}

	// The event id reused with another amount: 422, nothing stored.
	r := e.do(t, "POST", "/v1/events", event("e1", "acct-1", 1501))
	if r.status != http.StatusUnprocessableEntity || r.header.Get("Content-Type") != api.ContentTypeProblem {
		t.Fatalf("reused event_id: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
	}

	waitFor(t, "all events credited", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.ledger_entries`) == 11
	})
	got := e.balances(t)
	want := map[string]int64{"acct-0": 400, "acct-1": 1500 + 300, "acct-2": 300}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("balances = %v, want %v", got, want)
	}

	// A duplicate after completion reports the stored result.
	r = e.do(t, "POST", "/v1/events", event("e1", "acct-1", 1500))
	var er api.EventResponse
	r.json(t, &er)
	if r.status != http.StatusOK || er.Status != "duplicate" || er.State != "completed" || !strings.Contains(string(er.Result), `"entry_id"`) {
		t.Fatalf("duplicate after completion: %d %s", r.status, r.body)
	}

	// The account.
	r = e.do(t, "GET", "/v1/accounts/acct-1?limit=2", "")
	var a api.AccountResponse
	r.json(t, &a)
	if r.status != http.StatusOK || a.BalanceCents != 1800 || a.Entries != 4 || len(a.RecentEntries) != 2 {
		t.Fatalf("account: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/v1/accounts/nobody", ""); r.status != http.StatusNotFound {
		t.Fatalf("unknown account: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/v1/accounts/bad%20id", ""); r.status != http.StatusBadRequest {
		t.Fatalf("invalid account id: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/healthz", ""); r.status != http.StatusOK {
		t.Fatalf("healthz: %d %s", r.status, r.body)
	}
}

func TestInvalidEventsGet400(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	const ok = `"event_id":"e","order_id":"o","account_id":"a"`
	for _, c := range []struct {
		name, body string
		fields     []string
	}{
		{"empty", ``, []string{"body"}},
		{"not json", `nope`, []string{"body"}},
		{"array", `[1]`, []string{"body"}},
		{"trailing data", `{` + ok + `,"amount_cents":1,"occurred_at":"2026-01-01T00:00:00Z"} {}`, []string{"body"}},
		{"unknown field", `{` + ok + `,"amount_cents":1,"occurred_at":"2026-01-01T00:00:00Z","extra":1}`, []string{"extra"}},
		{"repeated field", `{` + ok + `,"amount_cents":1,"amount_cents":2,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"missing fields", `{"event_id":"e"}`, []string{"order_id", "account_id", "amount_cents", "occurred_at"}},
		{"null", `{` + ok + `,"amount_cents":null,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"zero amount", `{` + ok + `,"amount_cents":0,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"negative amount", `{` + ok + `,"amount_cents":-3,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"fraction", `{` + ok + `,"amount_cents":1.5,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"exponent", `{` + ok + `,"amount_cents":1e3,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"string amount", `{` + ok + `,"amount_cents":"5","occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"huge amount", `{` + ok + `,"amount_cents":99999999999999999999,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"amount_cents"}},
		{"bad time", `{` + ok + `,"amount_cents":1,"occurred_at":"2026-13-01"}`, []string{"occurred_at"}},
		{"time without zone", `{` + ok + `,"amount_cents":1,"occurred_at":"2026-01-01T00:00:00"}`, []string{"occurred_at"}},
		{"number id", `{"event_id":7,"order_id":"o","account_id":"a","amount_cents":1,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"event_id"}},
		{"empty id", `{"event_id":"","order_id":"o","account_id":"a","amount_cents":1,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"event_id"}},
		{"bad account", `{"event_id":"e","order_id":"o","account_id":"a b/c","amount_cents":1,"occurred_at":"2026-01-01T00:00:00Z"}`, []string{"account_id"}},
		{"several", `{"event_id":"e","account_id":"","amount_cents":-1,"occurred_at":"x"}`, []string{"order_id", "account_id", "amount_cents", "occurred_at"}},
	} {
		r := e.do(t, "POST", "/v1/events", c.body)
		var p api.Problem
		r.json(t, &p)
		var fields []string
		for _, f := range p.Errors {
			fields = append(fields, f.Field)
		}
		slices.Sort(fields)
		want := slices.Sorted(slices.Values(c.fields))
		if r.status != http.StatusBadRequest || r.header.Get("Content-Type") != api.ContentTypeProblem ||
			p.Type != api.ProblemInvalidBody || !slices.Equal(fields, want) {
			t.Errorf("%s: %d %s, fields %v, want 400 with %v", c.name, r.status, r.body, fields, want)
		}
	}
	r := e.do(t, "POST", "/v1/events", "x", "Content-Type", "text/plain")
	if r.status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/v1/events", `{"x":"`+strings.Repeat("a", api.MaxBodyBytes)+`"}`); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("large body: %d", r.status)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != 0 {
		t.Fatalf("%d messages stored from invalid bodies", n)
	}
}

func TestCreditsWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	const body = `{"account_id":"acct-9","amount_cents":250}`
	r := e.do(t, "POST", "/v1/credits", body, "Idempotency-Key", `"k-1"`)
	var c api.CreditResponse
	r.json(t, &c)
	if r.status != http.StatusCreated || c.BalanceCents != 250 || c.EntryID == 0 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	// Retries, concurrent: the stored response (or 409 while the first is in flight), never a second credit.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			r := e.do(t, "POST", "/v1/credits", body, "Idempotency-Key", `"k-1"`)
			if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), fmt.Sprintf(`"entry_id":%d`, c.EntryID)) {
				t.Errorf("retry: %d %v %s", r.status, r.header, r.body)
			}
		})
	}
	wg.Wait()
	if r := e.do(t, "POST", "/v1/credits", `{"account_id":"acct-9","amount_cents":251}`, "Idempotency-Key", `"k-1"`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("key reused: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/v1/credits", body); r.status != http.StatusBadRequest {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/v1/credits", `{"account_id":"acct-9","amount_cents":0}`, "Idempotency-Key", `"k-2"`); r.status != http.StatusBadRequest {
		t.Fatalf("invalid credit: %d %s", r.status, r.body)
	}
	// Another caller's key space: the same key is a new request.
	r = e.do(t, "POST", "/v1/credits", body, "Idempotency-Key", `"k-1"`, "Authorization", "Bearer other")
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("other principal: %d %s", r.status, r.body)
	}
	if got := e.balances(t); got["acct-9"] != 500 || len(got) != 1 {
		t.Fatalf("balances = %v, want acct-9: 500", got)
	}
}

// GET /v1/accounts/{id} checks the running balance against the sum of the entries, in one snapshot,
// and refuses to answer an inconsistent one (which only a write outside the ledger can cause).
func TestAccountBalanceCheckedAgainstEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	r := e.do(t, "POST", "/v1/credits", `{"account_id":"acct-c","amount_cents":700}`, "Idempotency-Key", `"c-1"`)
	if r.status != http.StatusCreated {
		t.Fatalf("credit: %d %s", r.status, r.body)
	}
	var a api.AccountResponse
	r = e.do(t, "GET", "/v1/accounts/acct-c", "")
	r.json(t, &a)
	if r.status != http.StatusOK || a.BalanceCents != 700 || a.Entries != 1 {
		t.Fatalf("account: %d %s", r.status, r.body)
	}
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`UPDATE {schema}.accounts SET balance_cents = balance_cents + 1`)); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "GET", "/v1/accounts/acct-c", ""); r.status != http.StatusInternalServerError {
		t.Fatalf("account with a tampered balance: %d %s, want 500", r.status, r.body)
	}
}

// TestConcurrentEventsCoalesced: 32 clients post events, each sent 1 to 3 times, shuffled; the
// API's Receive calls share statements (coalescing is on by default). Every event gets exactly one
// 202 and a 200 for each copy, and every balance is exact once the workers are done.
func TestConcurrentEventsCoalesced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	r := rand.New(rand.NewPCG(13, 4))
	type send struct {
		id, account string
		amount      int64
	}
	const events = 150
	var sends []send
	want := map[string]int64{}
	for i := range events {
		s := send{fmt.Sprintf("c-%d", i), fmt.Sprintf("acct-%d", i%7), int64(i + 1)}
		want[s.account] += int64(i + 1)
		for range 1 + r.IntN(3) {
			sends = append(sends, s)
		}
	}
	r.Shuffle(len(sends), func(i, j int) { sends[i], sends[j] = sends[j], sends[i] })
	statuses := make([]int, len(sends))
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range work {
				statuses[i] = e.do(t, "POST", "/v1/events", event(sends[i].id, sends[i].account, sends[i].amount)).status
			}
		})
	}
	for i := range sends {
		work <- i
	}
	close(work)
	wg.Wait()
	accepted := map[string]int{}
	for i, st := range statuses {
		switch st {
		case http.StatusAccepted:
			accepted[sends[i].id]++
		case http.StatusOK:
		default:
			t.Fatalf("%s: status %d", sends[i].id, st)
		}
	}
	for i := range events {
		if id := fmt.Sprintf("c-%d", i); accepted[id] != 1 {
			t.Errorf("%s: %d answers 202, want 1", id, accepted[id])
		}
	}
	waitFor(t, "all events credited", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.ledger_entries`) == events
	})
	if got := e.balances(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("balances = %v, want %v", got, want)
	}
}
