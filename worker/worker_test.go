package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

func TestDuplicateDeliveryOneEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 5 {
		e.receive(t, "order-1")
	}
	var calls atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		calls.Add(1)
		if err := m.SetResult(map[string]any{"credited": m.Payload.Amount}); err != nil {
			return err
		}
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "completion", func() bool { return e.count(t, "completed") == 1 })
	// A sixth delivery after completion is a duplicate reporting the stored result.
	r, err := e.client.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: "order-1", Kind: "credit", Payload: []byte(`{"amount":1}`)})
	if err != nil || r.Outcome != inbox.Duplicate || r.State != inbox.StateCompleted || string(r.Result) != `{"credited": 1}` {
		t.Fatalf("late duplicate: %+v %v (result %s)", r, err, r.Result)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 1 || calls.Load() != 1 {
		t.Fatalf("effects = %d, handler calls = %d; want 1 and 1", n, calls.Load())
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`); n != 0 {
		t.Fatalf("queue rows left: %d", n)
	}
}

func TestTransientFailureThenSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "flaky")
	var calls atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		// The effect is written before the failure: it must be rolled back.
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		if calls.Add(1) <= 2 {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "completion", func() bool { return e.count(t, "completed") == 1 })
	state, started, failed, _ := e.state(t, "flaky")
	lastErr := e.lastFailure(t, "flaky")
	if state != "completed" || started != 3 || failed != 2 || lastErr != "downstream unavailable" {
		t.Fatalf("got state=%s started=%d failed=%d last_error=%q", state, started, failed, lastErr)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

func TestPoisonPermanentAndPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "poison", "permanent", "panics", "fine-1", "fine-2", "baddecode")
	if _, err := e.client.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: "baddecode", Kind: "credit", Payload: []byte(`{"amount":"x"}`)}); !errors.Is(err, inbox.ErrKeyConflict) {
		t.Fatalf("want conflict, got %v", err)
	}
	var panics atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		switch m.Key {
		case "poison":
			return errors.New("always fails")
		case "permanent":
			return txinbox.Permanent(errors.New("invalid account"))
		case "panics":
			panics.Add(1)
			panic("handler bug")
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 3})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })

	if s, started, failed, le := e.state(t, "poison"); s != "dead" || started != 3 || failed != 3 || le != "always fails" {
		t.Errorf("poison: %s %d %d %q", s, started, failed, le)
	}
	if s, started, failed, le := e.state(t, "permanent"); s != "dead" || started != 1 || failed != 1 || !strings.Contains(le, "invalid account") {
		t.Errorf("permanent: %s %d %d %q", s, started, failed, le)
	}
	if s, _, failed, le := e.state(t, "panics"); s != "dead" || failed != 3 || !strings.Contains(le, "panic: handler bug") || !strings.Contains(le, "goroutine") {
		t.Errorf("panic: %s %d %q", s, failed, le)
	}
	if panics.Load() != 3 {
		t.Errorf("panicking handler ran %d times, want 3", panics.Load())
	}
	for _, k := range []string{"fine-1", "fine-2", "baddecode"} {
		if s, _, _, _ := e.state(t, k); s != "completed" {
			t.Errorf("%s: %s", k, s)
		}
	}
	// Only the good messages left an effect.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 3 {
		t.Errorf("effects = %d, want 3", n)
	}
}

func TestUndecodablePayloadIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.client.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: "bad", Kind: "credit", Payload: []byte(`{"amount":"lots"}`)}); err != nil {
		t.Fatal(err)
	}
	e.receive(t, "good")
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })
	if s, started, _, le := e.state(t, "bad"); s != "dead" || started != 1 || !strings.Contains(le, "does not decode") {
		t.Fatalf("bad: %s %d %q", s, started, le)
	}
	if s, _, _, _ := e.state(t, "good"); s != "completed" {
		t.Fatalf("good: %s", s)
	}
}
