package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// checkingPublisher is a Publisher that accepts the topics of its set only (outbox.TopicChecker),
// and records the topics of the events handed to it.
type checkingPublisher struct {
	accepts map[string]bool
	mu      sync.Mutex
	got     []string // topics handed over
}

func (p *checkingPublisher) CheckTopic(topic string) error {
	if !p.accepts[topic] {
		return errors.New("no stream captures " + topic)
	}
	return nil
}

func (p *checkingPublisher) Publish(_ context.Context, events []outbox.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range events {
		p.got = append(p.got, ev.Topic)
	}
	return nil
}

// A relay whose Publisher declares the topics it accepts (outbox.TopicChecker) makes an event of
// another topic dead at its first attempt, with an error naming the topic and the publisher's
// reason, without handing it to Publish; the next event of its key goes on, and the events of
// accepted topics are sent.
func TestRelayDeadLettersARefusedTopicWithoutSending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := &checkingPublisher{accepts: map[string]bool{"orders": true}}
	ids := e.publish(t, msg("ordres", "o-1", 1), msg("orders", "o-1", 2), msg("orders", "", 3), msg("ordres", "", 4))
	run(t, e.relay(t, pub, func(c *outbox.RelayConfig) { c.MaxAttempts = 5 }))
	waitFor(t, "every event sent or dead", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue`) == 0
	})
	for i, want := range []string{"dead", "sent", "sent", "dead"} {
		var state, lastErr string
		var started int
		if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT state, attempts_started, coalesce(last_error, '')
			FROM {schema}.outbox WHERE event_id::text = $1`), ids[i]).Scan(&state, &started, &lastErr); err != nil {
			t.Fatal(err)
		}
		if state != want || started != 1 {
			t.Errorf("event %d: %s after %d attempts; want %s after 1", i, state, started, want)
		}
		if want == "dead" && (!strings.Contains(lastErr, `does not accept the topic "ordres"`) || !strings.Contains(lastErr, "no stream captures ordres")) {
			t.Errorf("event %d: last error %q; want the refusal, naming the topic and the publisher's reason", i, lastErr)
		}
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for _, topic := range pub.got {
		if topic != "orders" {
			t.Errorf("Publish was handed an event of the refused topic %q", topic)
		}
	}
	if len(pub.got) != 2 {
		t.Errorf("Publish was handed %d events, want 2", len(pub.got))
	}
}

// A Client whose Config.TopicChecker refuses a message's topic returns a *txinbox.ValidationError
// naming the message and the field, with the checker's reason, before anything is written (the
// transaction goes on); the relay's error of such an event matches outbox.ErrTopicRefused and is
// permanent.
func TestPublishChecksTopicsWithTheConfigsChecker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := outbox.New(e.Store(), outbox.Config{TopicChecker: &checkingPublisher{accepts: map[string]bool{"orders": true}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		_, err := c.Publish(ctx, tx, msg("orders", "", 1), msg("ordres", "", 2))
		var ve *txinbox.ValidationError
		if !errors.As(err, &ve) || ve.Index != 1 || ve.Field != "topic" || !strings.Contains(ve.Reason, "no stream captures ordres") {
			t.Fatalf("Publish with a refused topic: %v; want a *txinbox.ValidationError on message 1's topic with the checker's reason", err)
		}
		// Nothing was sent: the transaction goes on.
		_, err = c.Publish(ctx, tx, msg("orders", "", 3))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox`); n != 1 {
		t.Fatalf("%d events written, want 1 (the accepted call's)", n)
	}
	refused := outbox.CheckTopicOf(&checkingPublisher{}, "x")
	if !errors.Is(refused, outbox.ErrTopicRefused) || !txinbox.IsPermanent(refused) {
		t.Errorf("the relay's error of a refused topic: %v; want ErrTopicRefused, permanent", refused)
	}
}
