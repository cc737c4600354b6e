// Command ledger is the txinbox example service: a ledger that credits accounts exactly once for
// OrderPaid events delivered at least once.
//
// Usage:
//
//	ledger serve [flags]   the HTTP API and, unless --workers 0, the inbox workers in the same process
//	ledger work  [flags]   the inbox workers alone
//	ledger relay [flags]   the outbox relay: AccountCredited events to NATS JetStream
//	ledger demo  [flags]   a storm of duplicated events, failures, a worker crash and a replay, then a
//	                       summary; then the relay and the notifier (examples/notifier) through a private
//	                       NATS JetStream server, SIGKILLed and cut off; exit status 1 if any check fails
//
// Every command takes --database-url (default: $DATABASE_URL) and --schema, and migrates the schema on
// start (txinbox's tables with migrate.Up, then the ledger's own, version table ledger_db_version).
// The schema defaults to "public" for serve and work, and to "ledger_demo" for demo, which drops and
// recreates it first (--reset) and keeps it afterwards for inspection, ending with the command that
// drops it (or drops it itself with --drop). demo needs no database URL: it
// finds or starts a server (see package pgenv: 127.0.0.1:5432, else a throwaway cluster from local
// PostgreSQL binaries, else a Docker container).
//
// The HTTP API is documented in package api: POST /v1/events, POST /v1/credits (Idempotency-Key),
// GET /v1/accounts/{id}, GET /healthz; serve adds GET /metrics (Prometheus).
//
// serve, work and relay take --trace-file: the process's spans are appended to that file (package
// tracing: txotel as the Store's Tracer, the OpenTelemetry SDK's stdout exporter), and serve runs
// each request under a span, so that one trace runs from a credit's request to the handler of the
// service that consumes its AccountCredited event.
//
// serve and work can also consume OrderPaid events from RabbitMQ (--amqp-url, --amqp-queue) and NATS
// JetStream (--nats-url, --nats-stream, --nats-subject) through the txinbox adapters: each message is
// stored in the inbox (consumer "ledger", kind "OrderPaid", key = message id, else x-idempotency-key,
// else the body's event_id) and credited by the same handler as the events of POST /v1/events.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/examples/ledger/internal/api"
	"github.com/txinbox/txinbox/examples/ledger/internal/demo"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/examples/ledger/internal/outboxdemo"
	"github.com/txinbox/txinbox/examples/ledger/internal/pgenv"
	"github.com/txinbox/txinbox/examples/ledger/internal/tracing"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

const usage = `usage: ledger <command> [flags]

commands:
  serve   the HTTP API, GET /metrics and (unless --workers 0) the inbox workers
  work    the inbox workers alone
  relay   the outbox relay: publishes the AccountCredited events to NATS JetStream (--nats-url)
  demo    the exactly-once storm demo, then the two services (relay and notifier) under faults
          (exit status 1 if a check fails)

serve and work also consume OrderPaid events from RabbitMQ (--amqp-url, --amqp-queue) and/or
NATS JetStream (--nats-url, --nats-stream, --nats-subject) into the inbox when given those flags.
A message's key is its message id (AMQP message-id, Nats-Msg-Id), else its x-idempotency-key
header, else the event_id of its body; it must be the event's event_id.

Run "ledger <command> -h" for the flags of a command.
`

// run runs one command and returns the exit status. child builds the demo's crash child from its
// `ledger work` arguments; nil re-executes this binary (tests run their own binary instead).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, child func(args []string) *exec.Cmd) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "work":
		err = work(ctx, args[1:], stdout, stderr)
	case "relay":
		err = relay(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr, child)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ledger: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "ledger %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

var errUsage = errors.New("usage")

// common are the flags of every command.
type common struct {
	url      string
	schema   string
	logLevel string
}

// traceFlag is the --trace-file flag of the service commands (serve, work, relay).
type traceFlag struct{ path string }

func (t *traceFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&t.path, "trace-file", "", "append this process's OpenTelemetry spans to this file, one JSON object a line (the stdout exporter's); "+
		"with it, the process's txinbox Store is traced with txotel, and serve's requests run under spans (default: no spans)")
}

// open returns the tracing of `ledger <command>` (nil without --trace-file).
func (t *traceFlag) open(command string) (*tracing.Tracing, error) {
	return tracing.Open(t.path, "ledger "+command)
}

// closeTracing ends tr, after the process's work, and reports a failure to write its spans.
func closeTracing(tr *tracing.Tracing, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Close(ctx); err != nil {
		logger.Warn("ledger: closing the trace file", "err", err)
	}
}

func (c *common) register(fs *flag.FlagSet, schema string) {
	fs.StringVar(&c.url, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default: $DATABASE_URL)")
	fs.StringVar(&c.schema, "schema", schema, "schema holding the inbox and ledger tables (created and migrated on start)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

func (c *common) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// open connects, migrates and returns a pool of at most maxConns connections.
func (c *common) open(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	if c.url == "" {
		return nil, errors.New("no database: pass --database-url or set DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(c.url)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	if err := ledger.Migrate(ctx, cfg.ConnConfig, c.schema); err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// workerFlags are the flags of the worker pool, and the demo's fault injection.
type workerFlags struct {
	workers      int
	batchSize    int
	lease        time.Duration
	timeout      time.Duration
	poll         time.Duration
	maxAttempts  int
	owner        string
	failPercent  float64
	poison       string
	hangAfter    int64
	printOnHang  bool
	backoffBase  time.Duration
	backoffLimit time.Duration
}

func (w *workerFlags) register(fs *flag.FlagSet, workers int) {
	fs.IntVar(&w.workers, "workers", workers, "batches handled at once, each in its own transaction (0: no workers)")
	fs.IntVar(&w.batchSize, "batch-size", 32, "messages claimed and handled per transaction (1 to 64; worker.Config.BatchSize)")
	fs.DurationVar(&w.lease, "lease", 10*time.Second, "how long a claim holds before a crashed worker's messages are taken over")
	fs.DurationVar(&w.timeout, "timeout", 2*time.Second, "time limit of one handler call (must be below --lease)")
	fs.DurationVar(&w.poll, "poll", 250*time.Millisecond, "how often idle workers look for work")
	fs.IntVar(&w.maxAttempts, "max-attempts", 5, "attempts before a failing event becomes a dead letter")
	fs.DurationVar(&w.backoffBase, "backoff", 100*time.Millisecond, "delay before the first retry (doubled at each retry)")
	fs.DurationVar(&w.backoffLimit, "backoff-max", 2*time.Second, "longest delay between retries")
	fs.StringVar(&w.owner, "owner", "", "name of this worker in claims (default: host:pid:random)")
	// Fault injection, for the demo.
	fs.Float64Var(&w.failPercent, "fail-first-percent", 0, "fault injection: percent of events whose first attempt fails")
	fs.StringVar(&w.poison, "poison", "", "fault injection: comma-separated event ids whose every attempt fails")
	fs.Int64Var(&w.hangAfter, "hang-after", 0, "fault injection: hang for good (holding the batch) in the handler after this many messages")
	fs.BoolVar(&w.printOnHang, "print-on-hang", false, "fault injection: print \"HANG <event_id> <uncommitted entries>\" on stdout when hanging")
}

// faults returns the fault injection the flags ask for (nil for none).
func (w *workerFlags) faults(stdout io.Writer) *demo.Faults {
	if w.failPercent <= 0 && w.poison == "" && w.hangAfter <= 0 {
		return nil
	}
	f := &demo.Faults{FailFirstPercent: w.failPercent, HangAfter: w.hangAfter, Poison: map[string]bool{}}
	for _, id := range strings.Split(w.poison, ",") {
		if id = strings.TrimSpace(id); id != "" {
			f.Poison[id] = true
		}
	}
	if w.printOnHang {
		f.OnHang = func(eventID string, uncommitted int64) {
			fmt.Fprintf(stdout, "HANG %s %d\n", eventID, uncommitted)
			if s, ok := stdout.(interface{ Sync() error }); ok {
				_ = s.Sync()
			}
		}
	}
	return f
}

// runner returns the service's runner on store: the worker pool (none with --workers 0) and the
// schema's maintainer candidate, reporting to store's Tracer and Logger.
func (w *workerFlags) runner(store txinbox.Store, logger *slog.Logger, stdout io.Writer) (*runner.Runner, error) {
	store.Logger = logger
	cfg := runner.Config{Owner: w.owner}
	if w.workers > 0 {
		l, err := ledger.New(store)
		if err != nil {
			return nil, err
		}
		hs := worker.NewHandlers()
		// The demo's fault injection, if any, wraps the ledger's handler.
		worker.HandleBatch(hs, ledger.KindOrderPaid, w.faults(stdout).Inject(store.Schema, l.Handler(logger)))
		cfg.Pools = []worker.Config{{
			Consumer: ledger.Consumer, Handlers: hs,
			Concurrency: w.workers, BatchSize: w.batchSize, PollInterval: w.poll, Lease: w.lease, Timeout: w.timeout,
			MaxAttempts: w.maxAttempts,
			Backoff:     txinbox.Exponential{Base: w.backoffBase, Max: w.backoffLimit}}}
	}
	return runner.New(store, cfg)
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %q\n", fs.Args())
		return errUsage
	}
	return nil
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("ledger serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	var wf workerFlags
	var bf brokerFlags
	var tf traceFlag
	c.register(fs, "public")
	wf.register(fs, 4)
	bf.register(fs)
	tf.register(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "HOST:PORT to listen on (GET /metrics serves the Prometheus metrics)")
	coalesceMax := 0
	if v := os.Getenv("LEDGER_COALESCE_MAX"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(stderr, "LEDGER_COALESCE_MAX: %v\n", err)
			return errUsage
		}
		coalesceMax = n
	}
	fs.IntVar(&coalesceMax, "coalesce-max", coalesceMax, "most concurrent POST /v1/events whose events share one statement and commit (0: txinbox's default, 64; 1: off; default: $LEDGER_COALESCE_MAX)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := bf.check(); err != nil {
		return err
	}
	logger, err := c.logger(stderr)
	if err != nil {
		return err
	}
	db, err := c.open(ctx, int32(wf.workers+16))
	if err != nil {
		return err
	}
	defer db.Close()
	tr, err := tf.open("serve")
	if err != nil {
		return err
	}
	defer closeTracing(tr, logger)
	store := txinbox.Store{DB: db, Schema: c.schema, Tracer: tr.StoreTracer()}
	srcs, err := bf.sources(ctx, store, logger)
	if err != nil {
		return err
	}
	obs, err := newObservability(db, c.schema, srcs)
	if err != nil {
		closeSources(srcs)
		return err
	}
	// The pool, its maintainer and the API are counted by the metrics (the brokers' consumers are
	// counted apart: brokerCollector).
	counted := store
	counted.Tracer = txinbox.Tracers(store.Tracer, obs.metrics)
	rn, err := wf.runner(counted, logger, io.Discard)
	if err != nil {
		closeSources(srcs)
		return err
	}
	wake := func() {}
	if p := rn.Pool(ledger.Consumer); p != nil {
		wake = p.Wake
	}
	h, err := api.New(api.Config{DB: db, Schema: c.schema, Wake: wake, Logger: logger, CoalesceMax: coalesceMax,
		Tracer: counted.Tracer, TracerProvider: tr.TracerProvider()})
	if err != nil {
		closeSources(srcs)
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", obs.handler(logger))
	mux.Handle("/", h)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		closeSources(srcs)
		return err
	}
	srv := &http.Server{Handler: accessLog(logger, mux), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	if err := rn.Start(context.WithoutCancel(ctx)); err != nil {
		closeSources(srcs)
		return err
	}
	logger.Info("ledger: serving", "addr", ln.Addr().String(), "schema", c.schema, "workers", wf.workers, "coalesce_max", coalesceMax)
	cons := startConsuming(ctx, srcs, logger)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err = <-errc:
	case err = <-cons.Err():
		logger.Error("ledger: a broker consumer failed; shutting down", "err", err)
	case <-ctx.Done():
		logger.Info("ledger: shutting down")
	}
	// Consumers first (they finish and acknowledge the batch in hand), then the API, then the workers.
	cons.stop()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	_ = rn.Stop(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func work(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ledger work", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	var wf workerFlags
	var bf brokerFlags
	var tf traceFlag
	c.register(fs, "public")
	wf.register(fs, 4)
	bf.register(fs)
	tf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if wf.workers < 1 {
		return errors.New("--workers must be at least 1")
	}
	if err := bf.check(); err != nil {
		return err
	}
	logger, err := c.logger(stderr)
	if err != nil {
		return err
	}
	db, err := c.open(ctx, int32(wf.workers+4))
	if err != nil {
		return err
	}
	defer db.Close()
	tr, err := tf.open("work")
	if err != nil {
		return err
	}
	defer closeTracing(tr, logger)
	store := txinbox.Store{DB: db, Schema: c.schema, Tracer: tr.StoreTracer()}
	srcs, err := bf.sources(ctx, store, logger)
	if err != nil {
		return err
	}
	p, err := wf.runner(store, logger, stdout)
	if err != nil {
		closeSources(srcs)
		return err
	}
	if err := p.Start(context.WithoutCancel(ctx)); err != nil {
		closeSources(srcs)
		return err
	}
	logger.Info("ledger: working", "schema", c.schema, "workers", wf.workers)
	cons := startConsuming(ctx, srcs, logger)
	select {
	case err = <-cons.Err():
		logger.Error("ledger: a broker consumer failed; shutting down", "err", err)
	case <-ctx.Done():
	}
	cons.stop()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return errors.Join(err, p.Stop(sctx))
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, child func(args []string) *exec.Cmd) int {
	fs := flag.NewFlagSet("ledger demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, "ledger_demo")
	c.logLevel = "error"
	fs.Lookup("log-level").DefValue = "error"
	o := demo.DefaultOptions()
	fs.IntVar(&o.Events, "events", o.Events, "unique OrderPaid events")
	fs.IntVar(&o.MaxCopies, "max-copies", o.MaxCopies, "each event is delivered 1 to this many times")
	fs.IntVar(&o.Accounts, "accounts", o.Accounts, "accounts credited (0: events/25, at least 5)")
	fs.IntVar(&o.Producers, "producers", o.Producers, "concurrent HTTP producers")
	fs.IntVar(&o.Workers, "workers", o.Workers, "in-process worker batches at once")
	fs.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "messages per worker transaction")
	fs.Float64Var(&o.FailPercent, "fail-percent", o.FailPercent, "percent of events whose first attempt fails (transient)")
	fs.IntVar(&o.Credits, "credits", o.Credits, "synchronous credits through POST /v1/credits (Idempotency-Key), each sent 1 to 3 times")
	fs.BoolVar(&o.Crash, "crash", o.Crash, "run a child `ledger work` process and SIGKILL it while it holds a batch")
	fs.Int64Var(&o.Seed, "seed", 0, "random seed (0: random; printed in the summary)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "longest the drain may go without a message leaving the queue")
	fs.BoolVar(&o.Reset, "reset", true, "drop and recreate the schema first (only schemas named ledger_demo*)")
	drop := fs.Bool("drop", false, "drop the schemas at the end instead of keeping them for inspection (only schemas named ledger_demo*)")
	withOutbox := fs.Bool("outbox", true, "then run the two services: `ledger relay` publishing the AccountCredited events of the ledger's outbox to a private NATS JetStream server (nats-server), and the notifier (examples/notifier) consuming them into its inbox, with processes SIGKILLed, connections cut and the broker restarted; the notifier's schema is --schema followed by _notifier")
	outboxCredits := fs.Int("outbox-credits", 500, "credits made while the two services are faulted")
	notifierBin := fs.String("notifier", "", "the notifier's binary (default: built from ../notifier with go build)")
	pgMode := fs.String("pg", envOr("LEDGER_DEMO_PG", "auto"),
		"how to find PostgreSQL: auto (--database-url/DATABASE_URL, else 127.0.0.1:5432, else a throwaway cluster from local binaries, else Docker), url, local, cluster or container (default: $LEDGER_DEMO_PG or auto)")
	if err := parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.Reset && !strings.HasPrefix(c.schema, "ledger_demo") {
		fmt.Fprintf(stderr, "ledger demo: refusing to drop schema %q: --reset only drops schemas named ledger_demo*; pass --reset=false to use it as is\n", c.schema)
		return 2
	}
	if *drop && !strings.HasPrefix(c.schema, "ledger_demo") {
		fmt.Fprintf(stderr, "ledger demo: refusing to drop schema %q: --drop only drops schemas named ledger_demo*\n", c.schema)
		return 2
	}
	if *withOutbox { // before the ledger's part, which takes minutes
		if _, err := outboxdemo.FindNATSServer(); err != nil {
			fmt.Fprintf(stderr, "ledger demo: %v (or skip the two services with --outbox=false)\n", err)
			return 1
		}
	}
	mode, err := pgenv.ParseMode(*pgMode)
	if err != nil {
		fmt.Fprintln(stderr, "ledger demo:", err)
		return 2
	}
	logger, err := c.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ledger demo:", err)
		return 2
	}
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "demo: "+format+"\n", args...) }
	srv, err := pgenv.Open(ctx, mode, c.url, say)
	if err != nil {
		fmt.Fprintln(stderr, "ledger demo:", err)
		return 1
	}
	defer func() {
		if srv.Dir != "" {
			say("stopping and removing the throwaway cluster")
		}
		if err := srv.Close(); err != nil {
			say("cleaning up the database server: %v", err)
		}
	}()
	say("database: %s", srv.Description)
	o.URL, o.Database, o.Schema, o.Logger = srv.URL, srv.Description, c.schema, logger
	o.Progress = stderr
	o.ChildCommand = child
	if f, ok := stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			o.TTY = true // redraw one progress line with \r
		}
	}
	schemas := []string{c.schema}
	if *withOutbox {
		schemas = append(schemas, c.schema+"_notifier")
	}
	rep, err := demo.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "ledger demo:", err)
	} else {
		rep.Print(stdout)
	}
	ok := err == nil && rep.OK()
	if ok && *withOutbox {
		ok = runOutboxDemo(ctx, outboxdemo.Options{URL: srv.URL, LedgerSchema: c.schema, NotifierSchema: schemas[1],
			Credits: *outboxCredits, ChildStderr: stderr, Progress: stderr}, o.Reset, *notifierBin, child, stdout, stderr)
	}
	if err := leave(srv, schemas, *drop, stdout); err != nil {
		fmt.Fprintln(stderr, "ledger demo:", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

// runOutboxDemo runs the two-service part of the demo (package outboxdemo) after the ledger's own,
// prints its report and says whether its check holds. With reset, the notifier's schema is dropped
// first. notifierBin empty builds the notifier; child nil re-executes this binary for `ledger serve`
// and `ledger relay`.
func runOutboxDemo(ctx context.Context, o outboxdemo.Options, reset bool, notifierBin string, child func([]string) *exec.Cmd,
	stdout, stderr io.Writer) bool {
	fail := func(err error) bool { fmt.Fprintln(stderr, "ledger demo:", err); return false }
	if reset {
		conn, err := pgx.Connect(ctx, o.URL)
		if err != nil {
			return fail(err)
		}
		err = ledger.DropSchema(ctx, conn, o.NotifierSchema)
		_ = conn.Close(ctx)
		if err != nil {
			return fail(err)
		}
	}
	if notifierBin == "" {
		dir, err := os.MkdirTemp("", "ledger-demo-notifier-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(stderr, "demo: building the notifier (go build in ../notifier)")
		if notifierBin, err = buildNotifier(ctx, filepath.Join("..", "notifier"), dir); err != nil {
			return fail(err)
		}
	}
	o.NotifierCommand = func(args []string) *exec.Cmd { return exec.Command(notifierBin, args...) }
	o.LedgerCommand = child
	if o.LedgerCommand == nil {
		exe, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		o.LedgerCommand = func(args []string) *exec.Cmd { return exec.Command(exe, args...) }
	}
	rep, err := outboxdemo.Run(ctx, o)
	if err != nil {
		return fail(err)
	}
	rep.Print(stdout)
	return rep.OK()
}

// leave drops the demo's schemas (drop), or says what the demo leaves on srv and how to drop it.
func leave(srv *pgenv.Server, schemas []string, drop bool, w io.Writer) error {
	names, it, goes, quoted := " "+schemas[0], "it", "goes", make([]string, len(schemas))
	if len(schemas) > 1 {
		names, it, goes = "s "+strings.Join(schemas, " and "), "them", "go"
	}
	for i, s := range schemas {
		quoted[i] = pgx.Identifier{s}.Sanitize()
	}
	if srv.Throwaway {
		fmt.Fprintf(w, "Left: nothing (schema%s %s with the throwaway server).\n", names, goes)
		return nil
	}
	sql := "DROP SCHEMA IF EXISTS " + strings.Join(quoted, ", ") + " CASCADE"
	if drop {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, srv.URL)
		if err != nil {
			return fmt.Errorf("--drop: %w", err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("--drop: %w", err)
		}
		fmt.Fprintf(w, "Dropped schema%s (--drop).\n", names)
		return nil
	}
	target := shellQuote(srv.URL)
	if pgenv.HasPassword(srv.URL) {
		target = `"$DATABASE_URL"` // not printed: the URL holds a password
	}
	fmt.Fprintf(w, "Left: schema%s on %s, for inspection. To drop %s:\n  psql %s -c %s\n(or run the demo with --drop)\n",
		names, srv.Description, it, target, shellQuote(sql))
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
