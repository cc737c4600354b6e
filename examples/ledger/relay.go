package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/natsjs"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/runner"
)

// The JetStream stream of the ledger's events. Its duplicate window drops a message whose
// Nats-Msg-Id (the outbox event id) it stored within the window: a relay that publishes an event
// again (after a crash, say) stores it once. Consumers deduplicate what comes later.
const (
	eventsStream     = "LEDGER_EVENTS"
	eventsSubjects   = "ledger.events.>"
	eventsDupeWindow = 2 * time.Minute
)

// ensureStream creates the stream of the ledger's events if it does not exist.
func ensureStream(ctx context.Context, js jetstream.JetStream, name string) error {
	_, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{eventsSubjects},
			Storage: jetstream.FileStorage, Duplicates: eventsDupeWindow})
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	return nil
}

// relay runs `ledger relay`: a runner.Runner of one outbox.Relay (and the schema's maintainer
// candidate) that publishes the ledger's AccountCredited events to
// NATS JetStream (subject = topic, Nats-Msg-Id = event id, in the CloudEvents envelope whose
// partitionkey is the event's outbox key, the account) until SIGTERM. With --trace-file, each event
// is sent with the context of its txinbox.relay span, a child of the trace context the credit recorded.
func relay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ledger relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	var tf traceFlag
	c.register(fs, "public")
	tf.register(fs)
	natsURL := fs.String("nats-url", "", "NATS server to publish to, e.g. nats://127.0.0.1:4222 (required)")
	stream := fs.String("nats-stream", eventsStream, "JetStream stream capturing "+eventsSubjects+" (created if missing, with a "+eventsDupeWindow.String()+" duplicate window)")
	batchSize := fs.Int("batch-size", 100, "most events claimed at once and published together")
	lease := fs.Duration("lease", time.Minute, "after it, another relay takes over the events of a relay that died")
	timeout := fs.Duration("timeout", 30*time.Second, "bound of one batch's publishing (must be below --lease)")
	hangAfter := fs.Int64("hang-after-batches", 0, "fault injection: after this many batches, publish half of the next one of two events or more, print \"HANG <published> <batch>\" and hang for good")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *natsURL == "" {
		return errors.New("--nats-url is required")
	}
	logger, err := c.logger(stderr)
	if err != nil {
		return err
	}
	db, err := c.open(ctx, 8)
	if err != nil {
		return err
	}
	defer db.Close()
	tr, err := tf.open("relay")
	if err != nil {
		return err
	}
	defer closeTracing(tr, logger) // after the relay stopped
	nc, err := nats.Connect(*natsURL, nats.Name("ledger-relay"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("nats: connect %s: %w", redact(*natsURL), err)
	}
	defer nc.Close() // after the relay stopped
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(natsjs.DefaultAckTimeout))
	if err != nil {
		return err
	}
	for { // the broker may not answer yet: retry
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = ensureStream(sctx, js, *stream)
		cancel()
		if err == nil {
			break
		}
		logger.Warn("ledger: cannot reach the JetStream stream yet; retrying in 1s", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	var pub outbox.Publisher
	pub, err = natsjs.NewPublisher(natsjs.PublisherConfig{JetStream: js, ExpectStream: *stream, AckTimeout: *timeout / 2})
	if err != nil {
		return err
	}
	if *hangAfter > 0 {
		pub = &hangingPublisher{Publisher: pub, after: *hangAfter, out: stdout}
	}
	r, err := runner.New(txinbox.Store{DB: db, Schema: c.schema, Tracer: tr.StoreTracer(), Logger: logger}, runner.Config{Relays: []outbox.RelayConfig{{
		Publisher: pub, BatchSize: *batchSize, Lease: *lease, Timeout: *timeout,
	}}})
	if err != nil {
		return err
	}
	if err := r.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	logger.Info("ledger: relaying AccountCredited events", "schema", c.schema, "nats", redact(*natsURL), "stream", *stream,
		"topic", ledger.TopicAccountCredited)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return r.Stop(sctx)
}

// hangingPublisher is the relay's fault injection: after `after` batches it publishes the first half
// of the next batch of two events or more, says so on out, and never returns (nor do the later calls), holding the claims of
// its events, as a relay that froze mid-batch would. The demo then kills the process.
type hangingPublisher struct {
	outbox.Publisher
	after int64
	out   io.Writer

	mu      sync.Mutex
	batches int64 // published
	hanging bool
}

func (h *hangingPublisher) Publish(ctx context.Context, events []outbox.Event) error {
	h.mu.Lock()
	first := !h.hanging && h.batches >= h.after && len(events) >= 2
	hang := h.hanging || first
	h.hanging = hang
	if !hang {
		h.batches++
	}
	h.mu.Unlock()
	if !hang {
		return h.Publisher.Publish(ctx, events)
	}
	if first {
		half := events[:len(events)/2]
		published := 0
		if err := h.Publisher.Publish(ctx, half); err == nil {
			published = len(half)
		}
		fmt.Fprintf(h.out, "HANG %d %d\n", published, len(events))
		if f, ok := h.out.(*os.File); ok {
			_ = f.Sync()
		}
	}
	select {} // for good: the process is to be killed
}
