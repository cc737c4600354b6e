package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// IsPermanent reports an error that is a *PermanentError or wraps one, however deep (fmt.Errorf's
// %w, errors.Join, a BatchError).
func TestIsPermanentOfWrappedErrors(t *testing.T) {
	t.Parallel()
	refused := txinbox.Permanent(errors.New("refused"))
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("timeout"), false},
		{refused, true},
		{fmt.Errorf("sending: %w", refused), true},
		{fmt.Errorf("broker: %w", fmt.Errorf("sending: %w", refused)), true},
		{errors.Join(errors.New("timeout"), refused), true},
		{&outbox.BatchError{Errs: []error{nil, refused}}, true},
		{fmt.Errorf("sending: %v", refused), false}, // %v: the text only, not the error
	} {
		if got := txinbox.IsPermanent(c.err); got != c.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A Publisher that wraps a Permanent error (fmt.Errorf's %w), for the whole call or for one event of
// a BatchError, makes the event dead after one attempt, as the unwrapped error does: the relay asks
// IsPermanent, which unwraps. An event whose error is not permanent is retried (here, then
// acknowledged).
func TestWrappedPermanentErrorMakesTheEventDeadAtOnce(t *testing.T) {
	t.Parallel()
	refused := func(topic string) error {
		return fmt.Errorf("publishing to %s: %w", topic, txinbox.Permanent(errors.New("the broker refuses this event")))
	}
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var mu sync.Mutex
			tries := map[string]int{}
			pub := outbox.PublisherFunc(func(_ context.Context, events []outbox.Event) error {
				mu.Lock()
				defer mu.Unlock()
				errs := make([]error, len(events))
				for i, ev := range events {
					tries[ev.ID]++
					switch {
					case !batch:
					case ev.Topic == "refused":
						errs[i] = refused(ev.Topic)
					case ev.Topic == "flaky" && tries[ev.ID] == 1:
						errs[i] = errors.New("timeout")
					}
				}
				if !batch {
					return refused(events[0].Topic) // one error for the whole call: no BatchError
				}
				return outbox.Errors(errs)
			})
			var ids []string
			if batch {
				ids = e.publish(t, msg("refused", "a", 1), msg("flaky", "b", 2), msg("fine", "c", 3))
			} else {
				ids = e.publish(t, msg("refused", "a", 1), msg("refused", "", 2))
			}
			run(t, e.relay(t, pub, func(c *outbox.RelayConfig) { c.MaxAttempts = 5 }))
			waitFor(t, "every event sent or dead", func() bool {
				return e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue`) == 0
			})
			check := func(id, state string, started, failed int) {
				t.Helper()
				var s string
				var st, f int
				if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT state, attempts_started, attempts_failed
					FROM {schema}.outbox WHERE event_id::text = $1`), id).Scan(&s, &st, &f); err != nil {
					t.Fatal(err)
				}
				if s != state || st != started || f != failed {
					t.Errorf("event %s: %s after %d attempts started, %d failed; want %s, %d, %d", id, s, st, f, state, started, failed)
				}
				mu.Lock()
				defer mu.Unlock()
				if n := tries[id]; n != started {
					t.Errorf("event %s handed over %d times, want %d", id, n, started)
				}
			}
			if batch {
				check(ids[0], "dead", 1, 1)
				check(ids[1], "sent", 2, 1)
				check(ids[2], "sent", 1, 0)
			} else {
				check(ids[0], "dead", 1, 1)
				check(ids[1], "dead", 1, 1)
			}
		})
	}
}
