package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/examples/ledger/internal/api"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// call sends one request with http.DefaultClient (see request).
func call(t *testing.T, method, url, body string, header ...string) response {
	t.Helper()
	return request(t, http.DefaultClient, method, url, body, header...)
}

// request sends one request (a JSON body if any; header as name, value pairs) and reads the answer.
func request(t *testing.T, c *http.Client, method, url, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestServeEndToEnd runs `ledger serve` as a user would, with the database in DATABASE_URL: it
// migrates, answers /healthz, takes an event (202, then 200 for the copy) and a credit with its
// Idempotency-Key (201, then the replay), credits the event once, and /metrics counts it all.
func TestServeEndToEnd(t *testing.T) { // not parallel: t.Setenv
	schema, url := testdb.NewSchema(t)
	t.Setenv("DATABASE_URL", url)
	cmd := startCommand(t, "serve", "--addr", "127.0.0.1:0", "--schema", schema, "--workers", "2", "--poll", "20ms")
	base := "http://" + cmd.waitServing(t)

	// Migrated: txinbox's tables and the ledger's, with their version tables.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"accounts", "inbox", "inbox_queue", "ledger_db_version", "ledger_entries", "txinbox_db_version"} {
		if !slices.Contains(tables, want) {
			t.Fatalf("table %s missing after serve started; tables: %v", want, tables)
		}
	}

	if r := call(t, "GET", base+"/healthz", ""); r.status != http.StatusOK {
		t.Fatalf("healthz: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", base+"/v1/events", event("e2e-1", "acct-e2e", 1234)); r.status != http.StatusAccepted {
		t.Fatalf("first delivery: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", base+"/v1/events", event("e2e-1", "acct-e2e", 1234)); r.status != http.StatusOK {
		t.Fatalf("second delivery: %d %s", r.status, r.body)
	}
	waitFor(t, "the event to be credited", func() bool {
		return call(t, "GET", base+"/v1/accounts/acct-e2e", "").status == http.StatusOK
	})
	const credit = `{"account_id":"acct-e2e","amount_cents":500}`
	if r := call(t, "POST", base+"/v1/credits", credit, "Idempotency-Key", `"e2e-k1"`); r.status != http.StatusCreated {
		t.Fatalf("credit: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", base+"/v1/credits", credit, "Idempotency-Key", `"e2e-k1"`); r.status != http.StatusCreated ||
		r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("credit replay: %d %v %s", r.status, r.header, r.body)
	}
	r := call(t, "GET", base+"/v1/accounts/acct-e2e", "")
	var a api.AccountResponse
	r.json(t, &a)
	if r.status != http.StatusOK || a.BalanceCents != 1734 || a.Entries != 2 || len(a.RecentEntries) != 2 {
		t.Fatalf("account: %d %s", r.status, r.body)
	}

	// The metrics count the attempt once its transaction ended (txinbox.OpHandled): wait for it.
	const completed = `txinbox_processed_total{consumer="ledger",kind="OrderPaid",outcome="completed"}`
	var m map[string]float64
	waitFor(t, "the completed attempt in /metrics", func() bool {
		m = scrape(t, base)
		return m[completed] >= 1
	})
	for name, want := range map[string]float64{
		`txinbox_received_total{consumer="ledger",outcome="inserted"}`:  1,
		`txinbox_received_total{consumer="ledger",outcome="duplicate"}`: 1,
		completed: 1,
		`txinbox_queue_messages{consumer="ledger",state="ready"}`: 0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present: %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Errorf("go_goroutines missing from /metrics")
	}
	if code := cmd.stop(); code != 0 {
		t.Fatalf("serve exited with status %d:\n%s", code, cmd.stderr.String())
	}
}
