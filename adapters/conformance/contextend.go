package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/pubtest"
	"github.com/txinbox/txinbox/outbox"
)

// ContextEndEvents is the number of events of each call the test ContextEnd makes, each with a key
// of its own.
const ContextEndEvents = 16

// ContextEndSetup is what a broker gives the test ContextEnd: its publisher and a way to make its
// broker hold messages unacknowledged.
type ContextEndSetup struct {
	// Publisher is the publisher under test, sending the events of Topic. Its own time limits (an
	// acknowledgment timeout, a request timeout) must be long, a minute say: the ctx of the call has
	// to end first.
	Publisher outbox.Publisher
	// Topic is the events' topic.
	Topic string
	// Hold makes the broker hold some of the messages of Topic it gets from then on, until Release:
	// neither acknowledge nor refuse them (a PubAck held back, a publish frame that does not reach
	// the broker, produce requests that are not answered, an HTTP request left waiting). Of the
	// events of one call (ContextEndEvents of them, with distinct keys) it must acknowledge at least
	// one and hold at least one: it acknowledges the next few messages and holds every later one,
	// say, or holds those of one partition.
	Hold func()
	// Holding reports whether the broker holds a message now (one the publisher may wait for).
	Holding func() bool
	// Release makes the broker take the messages of Topic again, from then on; those it held it may
	// take now, or drop. The test calls it once after each Hold: at the latest when it ends, before the
	// cleanups that the set-up registered (closing the publisher).
	Release func()
	// Received returns every message of Topic the broker took so far (stored, whether or not its
	// acknowledgment reached the publisher): exactly, as of the call, so that a message it does
	// not return was not acknowledged before the call.
	Received func() []Received
	// Relay, if set, adjusts the configuration of the check's relay, after the check set its
	// Timeout to a second.
	Relay func(*outbox.RelayConfig)
}

// contextEnd checks what a publisher returns when the ctx of a Publish call ends part-way, while its
// broker holds some of the call's events unacknowledged (Hold):
//
//   - a direct call whose ctx is cancelled (as when the relay stops) once the broker acknowledged some
//     of its events and holds another: every event the broker did not take by the time the call
//     returned fails with ctx's error (context.Canceled), and none is reported acknowledged (nil);
//   - through a real relay over a real outbox, whose Timeout (a second) ends each call: until
//     Release, no event that the broker did not take is recorded as sent, and each of its attempts
//     is a retry failed with ctx's error (context.DeadlineExceeded); after Release each event is sent
//     and arrives.
//
// A publisher that reported an event not yet handed over, or still awaiting its acknowledgment, as
// acknowledged when ctx ended would have the relay record it sent: the event would never arrive.
func contextEnd(t *testing.T, e *pubtest.Env, h ContextEndSetup) {
	t.Helper()
	// The broker holds from hold to release; a check that stops in between releases it when the test
	// ends, before the publisher is closed (which may need the broker's answer).
	holding := false
	hold := func() { holding = true; h.Hold() }
	release := func() {
		if holding {
			holding = false
			h.Release()
		}
	}
	t.Cleanup(release)
	prefix := rand.Uint32()
	events := make([]outbox.Event, ContextEndEvents)
	for i := range events {
		events[i] = outbox.Event{ID: fmt.Sprintf("%08x-0000-4000-8000-%012d", prefix, i), Topic: h.Topic, Key: fmt.Sprintf("ctx-end-%d", i),
			Payload: payload("cancelled", i), Headers: headers(i), CreatedAt: time.Now(), Attempt: 1}
	}
	hold()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Publisher.Publish(ctx, events) }()
	adaptertest.WaitFor(t, "the broker to take some of the call's events and hold another", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Publish returned %v before its ctx ended, while the broker holds some of its events (took %d of %d)",
				err, len(taken(events, h.Received())), len(events))
		default:
		}
		return h.Holding() && len(taken(events, h.Received())) > 0
	})
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Publish did not return within 2 minutes of its ctx's end")
	}
	took := taken(events, h.Received())
	errs := eventErrors(t, err, len(events))
	held := 0
	for i, ev := range events {
		if took[ev.ID] {
			continue
		}
		held++
		switch {
		case errs[i] == nil:
			t.Errorf("event %d (%s): the broker never took it, yet Publish reported it acknowledged (nil) when ctx ended: the relay would record it sent, and it would never arrive", i, ev.ID)
		case !errors.Is(errs[i], context.Canceled):
			t.Errorf("event %d (%s): the broker never took it and Publish failed it with %v, want ctx's error (context.Canceled)", i, ev.ID, errs[i])
		}
	}
	if held == 0 {
		t.Fatalf("the broker took every event of the call: Hold held none")
	}
	t.Logf("ctx cancelled: the broker took %d of %d events; Publish returned %v", len(took), len(events), err)
	release()

	hold()
	var msgs []outbox.Message
	for i := range ContextEndEvents {
		msgs = append(msgs, outbox.Message{Topic: h.Topic, Key: fmt.Sprintf("ctx-end-%d", i), Payload: payload("timed out", i), Headers: headers(i)})
	}
	ids := e.Publish(t, true, msgs...)
	res := e.Relay(t, h.Publisher, func(cfg *outbox.RelayConfig) {
		cfg.Timeout = time.Second
		if h.Relay != nil {
			h.Relay(cfg)
		}
	})
	adaptertest.WaitFor(t, "each event to be sent or to have failed twice (the relay's Timeout)", func() bool {
		for _, id := range ids {
			r := e.Row(t, id)
			if r.State == "dead" {
				t.Fatalf("event %s is dead: %s", id, r.LastError)
			}
			if r.State != "sent" && r.AttemptsFailed < 2 {
				return false
			}
		}
		return true
	})
	took = map[string]bool{}
	for _, r := range h.Received() {
		took[r.ID] = true
	}
	held, lost := 0, 0
	var example error
	for i, id := range ids {
		if took[id] {
			continue
		}
		held++
		if r := e.Row(t, id); r.State != "pending" {
			lost++
			t.Errorf("event %d (%s) is %s though the broker never took it: the publisher reported it acknowledged when the relay's Timeout ended the call (last error %q)", i, id, r.State, r.LastError)
		}
		for _, a := range res.Of(id) {
			example = cmp.Or(example, a.Err)
			if a.Outcome != txinbox.OutcomeRetry || !errors.Is(a.Err, context.DeadlineExceeded) {
				t.Errorf("attempt of event %d (%s), which the broker never took: outcome %s, error %v; want a retry failed with ctx's error (context.DeadlineExceeded)", i, id, a.Outcome, a.Err)
			}
		}
	}
	if held == 0 {
		t.Fatalf("the broker took every event through the relay: Hold held none")
	}
	if lost > 0 {
		t.Fatalf("%d events the broker never took are recorded as sent: they will never arrive", lost)
	}
	t.Logf("relay: the broker held %d of %d events, each failed and retried (e.g. %v)", held, len(ids), example)
	release()
	e.WaitSent(t, ids)
	adaptertest.WaitFor(t, "every event to arrive once the broker takes them again", func() bool {
		took := map[string]bool{}
		for _, r := range h.Received() {
			took[r.ID] = true
		}
		for _, id := range ids {
			if !took[id] {
				return false
			}
		}
		return true
	})
}

// taken returns the ids of events that are among got.
func taken(events []outbox.Event, got []Received) map[string]bool {
	ours := map[string]bool{}
	for _, ev := range events {
		ours[ev.ID] = true
	}
	out := map[string]bool{}
	for _, r := range got {
		if ours[r.ID] {
			out[r.ID] = true
		}
	}
	return out
}

// eventErrors returns the error of each of n events from what a Publish call returned (see
// outbox.Publisher): nil, a BatchError of n errors, or one error for all of them.
func eventErrors(t testing.TB, err error, n int) []error {
	t.Helper()
	errs := make([]error, n)
	var be *outbox.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be):
		if len(be.Errs) != n {
			t.Fatalf("Publish returned a BatchError of %d errors for %d events: %v", len(be.Errs), n, err)
		}
		copy(errs, be.Errs)
	default:
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}
