package outbox_test

import (
	"context"
	"testing"

	"github.com/txinbox/txinbox/internal/engine"
	"github.com/txinbox/txinbox/outbox"
)

// A relay runner records its batch's outcomes in the transaction of its next claim. One that is
// about to sleep (until woken or its PollInterval: another runner polls) records them on its own
// first (Rest), so that its events do not stay unrecorded, and a key's next event held back, for as
// long as it sleeps.
func TestRelayRecordsBeforeItSleeps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish(t, msg("t", "k", 1), msg("t", "", 2))
	rec := newRecorder(t, nil)
	u := outbox.NewRunner(e.relay(t, rec, func(c *outbox.RelayConfig) { c.BatchSize = 10 }))
	ctx := context.Background()
	if out, err := u.Claim(ctx); err != nil || out != engine.Partial {
		t.Fatalf("claim: %v, %v; want a partial batch", out, err)
	}
	u.Run(ctx)
	if got := len(rec.ackedIDs()); got != 2 {
		t.Fatalf("%d events published, want 2", got)
	}
	if n := e.count(t, "sent"); n != 0 {
		t.Fatalf("%d events recorded sent before the next claim or Rest; the test no longer shows Rest's work", n)
	}
	u.Rest(ctx)
	if n := e.count(t, "sent"); n != 2 {
		t.Fatalf("after Rest %d events recorded sent, want 2", n)
	}
}
