package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/txinbox/txinbox/idempotency"
)

// processed checks that r is a response of the handler itself (201, not replayed) and returns it.
func processed(t *testing.T, who string, r resp) resp {
	t.Helper()
	if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("%s: %d %s=%q %s, want the handler's own 201", who, r.status,
			idempotency.HeaderReplayed, r.header.Get(idempotency.HeaderReplayed), r.body)
	}
	return r
}

// replayOf checks that r replays want: same status, body and Location, with the replay marker.
func replayOf(t *testing.T, who string, r, want resp) {
	t.Helper()
	if r.status != want.status || r.body != want.body || r.header.Get("Location") != want.header.Get("Location") ||
		r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("%s: %d %s=%q Location=%q %s, want the replay of %d Location=%q %s", who,
			r.status, idempotency.HeaderReplayed, r.header.Get(idempotency.HeaderReplayed), r.header.Get("Location"), r.body,
			want.status, want.header.Get("Location"), want.body)
	}
}

// Two principals using the same key have two records: each one's first request runs as its own (it
// is neither a replay of the other's response, nor a 409 or 422 caused by the other's record), and
// each one's retry replays its own stored response, never the other's. Every way a retry is answered
// from a record (replay, 422 for another request, 409 while in flight) is checked across principals,
// so a lookup or a write that loses the principal fails here.
func TestKeyScopedByPrincipalOnRetry(t *testing.T) {
	t.Run("same request", func(t *testing.T) {
		e := newEnv(t, idempotency.Config{})
		alice := processed(t, "alice's first request", e.post("/transfers", "alice", key1, `{"amount":1}`))
		bob := processed(t, "bob's first request", e.post("/transfers", "bob", key1, `{"amount":1}`))
		if alice.body == bob.body {
			t.Fatalf("alice and bob got the same response %s", bob.body)
		}
		for range 2 {
			replayOf(t, "bob's retry", e.post("/transfers", "bob", key1, `{"amount":1}`), bob)
			replayOf(t, "alice's retry", e.post("/transfers", "alice", key1, `{"amount":1}`), alice)
		}
		if n := e.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2 (once per principal)", n)
		}
	})

	// Bob's request differs from Alice's: his first request is not a reuse of her key (422), and
	// each retry of the other one's request is a reuse of one's own key, not the other's response.
	t.Run("different requests", func(t *testing.T) {
		e := newEnv(t, idempotency.Config{})
		alice := processed(t, "alice's first request", e.post("/transfers", "alice", key1, `{"amount":1}`))
		bob := processed(t, "bob's first request", e.post("/transfers", "bob", key1, `{"amount":2}`))
		replayOf(t, "bob's retry", e.post("/transfers", "bob", key1, `{"amount":2}`), bob)
		replayOf(t, "alice's retry", e.post("/transfers", "alice", key1, `{"amount":1}`), alice)
		problem(t, e.post("/transfers", "bob", key1, `{"amount":1}`), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
		problem(t, e.post("/transfers", "alice", key1, `{"amount":2}`), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
		if n := e.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2 (once per principal)", n)
		}
	})

	// While Alice's request runs, Bob's first request with the key runs (no 409), his retry replays
	// his response, and Alice's retry gets 409 (her own request in flight), not Bob's response.
	t.Run("in flight", func(t *testing.T) {
		e := newEnv(t, idempotency.Config{})
		release, first := inFlight(t, e) // alice, key1, {"amount":7}
		bob := processed(t, "bob's first request", e.post("/transfers", "bob", key1, `{"amount":7}`))
		replayOf(t, "bob's retry while alice's request runs", e.post("/transfers", "bob", key1, `{"amount":7}`), bob)
		problem(t, e.post("/transfers", "alice", key1, `{"amount":7}`), http.StatusConflict, idempotency.ProblemKeyInFlight)
		release()
		alice := processed(t, "alice's first request", <-first)
		if alice.body == bob.body {
			t.Fatalf("alice and bob got the same response %s", bob.body)
		}
		replayOf(t, "alice's retry", e.post("/transfers", "alice", key1, `{"amount":7}`), alice)
		replayOf(t, "bob's retry", e.post("/transfers", "bob", key1, `{"amount":7}`), bob)
		if n := e.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2 (once per principal)", n)
		}
	})
}
