package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// A message whose kind has no handler in the pool is dead at its first attempt (reason
// unknown_kind), not retried until MaxAttempts, and its error names the kinds the pool handles,
// sorted, at most 10 of them and how many more: a mistyped kind reads as one at once.
func TestUnknownKindIsDeadAtOnceNamingTheKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		kinds []string
		want  string
	}{
		{"few kinds", []string{"debit", "credit"}, `txinbox: no handler registered for this kind: "Credit" (this pool handles "credit", "debit")`},
		{"many kinds", append(keys("k", 12), "credit"), `"credit", "k-0", "k-1", "k-10", "k-11", "k-2", "k-3", "k-4", "k-5", "k-6" and 3 more)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if _, err := e.client.ReceiveMany(context.Background(), []inbox.Message{
				{Consumer: "ledger", Key: "typo", Kind: "Credit", Payload: []byte(`{"amount": 1}`)},
				{Consumer: "ledger", Key: "ok", Kind: "credit", Payload: []byte(`{"amount": 1}`)},
			}); err != nil {
				t.Fatal(err)
			}
			hs := worker.NewHandlers()
			for _, k := range tc.kinds {
				worker.Handle(hs, k, func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
					return applyCredit(ctx, tx, e.Schema, m)
				})
			}
			run(t, e.pool(t, hs, func(c *worker.Config) { c.MaxAttempts = 10 }))
			waitFor(t, "both settled", func() bool { return e.count(t, "dead")+e.count(t, "completed") == 2 })
			state, started, failed, lastErr := e.state(t, "typo")
			if state != "dead" || started != 1 || failed != 1 {
				t.Fatalf("typo: %s after %d attempts (%d failed); want dead at the first", state, started, failed)
			}
			if !strings.Contains(lastErr, tc.want) {
				t.Errorf("typo: last error %q, want it to contain %q", lastErr, tc.want)
			}
			if s, _, _, _ := e.state(t, "ok"); s != "completed" {
				t.Errorf("ok: %s, want completed", s)
			}
		})
	}
}
