// Command notifier is the second txinbox example service: it consumes the ledger's AccountCredited
// events (examples/ledger, published through its outbox by `ledger relay`) from NATS JetStream into
// its own inbox, and writes one notification per credit, exactly once, although the events arrive at
// least once.
//
// Usage:
//
//	notifier --database-url URL --nats-url nats://127.0.0.1:4222 [flags]
//
// It migrates its schema (txinbox's tables and the notifications table), then runs until SIGTERM:
//
//   - a txinbox/adapters/natsjs consumer reads the durable JetStream consumer "notifier" of the
//     stream LEDGER_EVENTS and stores each message in the inbox (consumer "notifier"; kind
//     AccountCredited, key = the outbox's event id and ordering key = the account, read from the
//     CloudEvents envelope the ledger's relay sends): one transaction per batch, acknowledged after
//     it commits. A copy of a stored event is a duplicate of the inbox
//     and is acknowledged without being stored again;
//   - a worker.Pool runs the handler once per stored event, in the transaction that completes it:
//     the notification row and the completion commit together. The pool runs --workers batches at
//     once (each of up to --batch-size messages, in its own transaction); an account's events share
//     an ordering key, so they are handled one at a time, in the order the ledger published them.
//
// With --trace-file, the process's spans are appended to that file (package txotel through the
// Store's Tracer): each stored batch's txinbox.receive span, linked to the trace context each event
// arrived with, and each event's txinbox.handle span, a child of it: the handler runs in the trace
// of the ledger's request that made the credit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/natsjs"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "notifier:", err)
		os.Exit(1)
	}
}

// The ledger's events: the stream, as `ledger relay` creates it, and the subject of AccountCredited.
const (
	stream  = "LEDGER_EVENTS"
	subject = "ledger.events.account-credited"
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("notifier", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default: $DATABASE_URL)")
	schema := fs.String("schema", "notifier", "schema of the notifier's inbox and notifications (created and migrated on start)")
	natsURL := fs.String("nats-url", "", "NATS server, e.g. nats://127.0.0.1:4222 (required)")
	durable := fs.String("nats-durable", "notifier", "durable JetStream consumer on "+stream+" (created or updated on start)")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "redelivery delay of a message whose batch was never acknowledged (a crash)")
	workers := fs.Int("workers", 4, "batches handled at once, each in its own transaction")
	batchSize := fs.Int("batch-size", 32, "most messages claimed and handled per transaction (at most one per account; worker.Config.BatchSize)")
	lease := fs.Duration("lease", 30*time.Second, "longest a batch transaction may sit idle (a frozen process) before the server ends it; the handler's time limit is a third of it")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	traceFile := fs.String("trace-file", "", "append this process's OpenTelemetry spans to this file, one JSON object a line (the stdout exporter's); default: no spans")
	hangAfter := fs.Int64("hang-after", 0, "fault injection: after this many notifications, print \"HANG <event id>\" and hang for good inside the handler's transaction")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *dbURL == "":
		return errors.New("no database: pass --database-url or set DATABASE_URL")
	case *natsURL == "":
		return errors.New("--nats-url is required")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	db, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := Migrate(ctx, db, *schema); err != nil {
		return err
	}
	tr, err := openTracing(*traceFile)
	if err != nil {
		return err
	}
	defer func() { // after the consumer and the pool stopped
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.close(sctx); err != nil {
			logger.Warn("notifier: closing the trace file", "err", err)
		}
	}()
	store := txinbox.Store{DB: db, Schema: *schema, Tracer: tr.storeTracer(), Logger: logger}

	// The worker pool: one notification per stored event.
	var hook func(m *worker.Message[AccountCredited])
	if *hangAfter > 0 {
		var n atomic.Int64
		hook = func(m *worker.Message[AccountCredited]) {
			if n.Add(1) > *hangAfter {
				fmt.Fprintf(stdout, "HANG %s\n", m.Key)
				if f, ok := stdout.(*os.File); ok {
					_ = f.Sync()
				}
				select {} // for good, the transaction open: the process is to be killed
			}
		}
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, KindAccountCredited, Handler(*schema, hook))
	pool, err := runner.New(store, runner.Config{Pools: []worker.Config{{Consumer: Consumer, Handlers: hs,
		Concurrency: *workers, BatchSize: *batchSize, Lease: *lease, Timeout: *lease / 3}}})
	if err != nil {
		return err
	}

	// The JetStream consumer: messages into the inbox with the natsjs defaults, read from the
	// CloudEvents envelope: key = its id, kind = its type, ordering key = its partitionkey (the
	// account), headers traceparent and tracestate = the relay's trace context.
	nc, err := nats.Connect(*natsURL, nats.Name("notifier"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The broker may not answer yet, nor the stream exist (the ledger's relay creates it): retry.
	var jc jetstream.Consumer
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		jc, err = js.CreateOrUpdateConsumer(cctx, stream, jetstream.ConsumerConfig{Durable: *durable,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: *ackWait, FilterSubject: subject})
		cancel()
		if err == nil {
			break
		}
		logger.Warn("notifier: cannot create the JetStream consumer yet; retrying in 1s", "stream", stream, "durable", *durable, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	cons, err := natsjs.New(natsjs.Config{Consumer: jc, Sink: adapters.SinkConfig{Store: store, Consumer: Consumer}})
	if err != nil {
		return err
	}

	if err := pool.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	if err := cons.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	logger.Info("notifier: consuming", "stream", stream, "subject", subject, "durable", *durable, "schema", *schema)
	select {
	case <-ctx.Done():
	case <-cons.Done():
		logger.Error("notifier: the consumer stopped", "err", cons.Stop(context.Background()))
	}
	// The consumer first (it stores and acknowledges the batch in hand), then the workers.
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return errors.Join(cons.Stop(sctx), pool.Stop(sctx))
}
