// Command txbench benchmarks txinbox against River and raw SQL on one PostgreSQL server and writes
// the results, as Markdown sections, to stdout and to RESULTS.md, with SVG charts in charts/ beside
// it.
//
// Usage (from the bench directory):
//
//	go run ./cmd/txbench [--quick] [--database-url URL] [--out RESULTS.md]
//	go run ./cmd/txbench --sustain 10m
//	go run ./cmd/txbench --tune
//	go run ./cmd/txbench --seen [--redis-addr 127.0.0.1:6379]
//	go run ./cmd/txbench --coalesce
//	go run ./cmd/txbench --recovery
//
// BENCH_QUICK=1 in the environment is the same as --quick. Each system runs in a fresh schema of its
// own (txbench_*), created and dropped by the run; benchmarks run one at a time. The main run writes
// the sections drain, ingest, latency, idle, growth, footprint, outbox and recovery (those --only
// selects; --only outbox runs the outbox section alone);
// --sustain writes sustain, --tune tune, --seen seen, --coalesce coalesce and coalesce-paced,
// --recovery recovery; every run also writes machine. A section is the text between the lines
// <!-- txbench:NAME:begin --> and <!-- txbench:NAME:end --> of the output file (bench.WriteSection):
// each run replaces the sections it measured and keeps the others. The drain and latency sections
// draw charts/drain.svg and charts/latency-cdf.svg, the outbox section charts/outbox.svg. The recovery rows run this program again as
// child processes (bench.RecoveryChildEnv).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/txinbox/txinbox/bench"
)

type options struct {
	url      string
	citusURL string // --citus-url: only the drains on it and on url (runCitus)
	quick    bool
	out      string
	only     map[string]bool
	runs     int
	n        int
	sustain  time.Duration
	tune     bool
	verbose  bool
	trace    bool
	seen     bool
	redis    string
	// coalesce runs only the coalesced-receive comparison.
	coalesce bool
	// coalesceOn is the coalescing of the "on" rows.
	coalesceOn bench.CoalesceConfig
	// recovery runs only the recovery rows (runRecovery).
	recovery bool

	inbox bench.InboxConfig
	// inboxBatchHandler is the HandlerConfig.BatchSize of the batch-handler drain.
	inboxBatchHandler int
	riverTx           bench.RiverConfig
	riverNoop         bench.RiverConfig
	rawClient         int

	// outbox configures the outbox benchmark; outboxN is its backlog (0: outboxEvents' default).
	outbox   bench.OutboxConfig
	outboxN  int
	outboxAB int
}

// batchHandlerConfig is the pool configuration of the batch-handler drain: the txinbox drain's, with
// the handler registered with worker.HandleBatch.
func (o *options) batchHandlerConfig() bench.InboxConfig {
	c := o.inbox
	c.HandlerBatchSize = o.inboxBatchHandler
	return c
}

func main() {
	if mode := os.Getenv(bench.RecoveryChildEnv); mode != "" {
		os.Exit(bench.RecoveryChild(mode))
	}
	o := options{}
	var only string
	flag.StringVar(&o.url, "database-url", bench.DefaultURL, "PostgreSQL server to benchmark (each system gets a fresh schema there)")
	flag.BoolVar(&o.quick, "quick", os.Getenv("BENCH_QUICK") == "1", "quick mode (under 2 minutes): fewer messages, one run each; also BENCH_QUICK=1")
	flag.StringVar(&o.out, "out", "RESULTS.md", "markdown file to write (its txbench section is replaced); empty: stdout only")
	flag.StringVar(&only, "only", "drain,ingest,latency,growth,outbox,recovery", "comma-separated benchmarks of the main run (recovery: written to its own section; outbox: the outbox relay against Watermill and a raw loop, over NATS JetStream and RabbitMQ)")
	flag.IntVar(&o.runs, "runs", 0, "runs per drain/ingest figure, the median is reported (default 3; quick 1)")
	flag.IntVar(&o.n, "n", 0, "messages per drain (default 100000; quick 20000)")
	flag.DurationVar(&o.sustain, "sustain", 0, "run only the sustained drain for this long (e.g. 10m)")
	flag.BoolVar(&o.tune, "tune", false, "run only the tuning sweep of worker counts and batch sizes")
	flag.BoolVar(&o.verbose, "v", false, "log progress to stderr")
	flag.BoolVar(&o.seen, "seen", false, "run only the seen-key cache comparison (80% redeliveries, 4 clients: no cache, LRU, Redis)")
	flag.StringVar(&o.redis, "redis-addr", "127.0.0.1:6379", "Redis server of the --seen comparison (its keys get a prefix of their own and expire)")
	flag.BoolVar(&o.coalesce, "coalesce", false, "run only the coalesced-receive comparison (single-message Receive from 32 goroutines, coalescing off vs on; paced at 1,000/s)")
	flag.IntVar(&o.coalesceOn.Max, "coalesce-max", 0, "inbox.Config.CoalesceMax of the --coalesce rows with coalescing on (0: the default)")
	flag.DurationVar(&o.coalesceOn.Wait, "coalesce-wait", 0, "inbox.Config.CoalesceWait of the --coalesce rows with coalescing on (0: the default)")
	flag.BoolVar(&o.recovery, "recovery", false, "run only the recovery rows: a process holding claims killed with SIGKILL, taken over by a fresh one; then with a process-killing poison (not in quick mode)")
	flag.BoolVar(&o.trace, "trace", false, "run only one txinbox drain with every statement traced, and print where the time goes (with --only outbox: one relay drain per broker)")
	flag.IntVar(&o.inbox.Concurrency, "inbox-concurrency", 4, "txinbox worker.Config.Concurrency")
	flag.IntVar(&o.inbox.BatchSize, "inbox-batch", 64, "txinbox worker.Config.BatchSize")
	flag.IntVar(&o.inboxBatchHandler, "inbox-batch-handler", bench.WorkerHandlerBatchSize, "txinbox HandlerConfig.BatchSize of the batch-handler drain")
	flag.IntVar(&o.riverTx.MaxWorkers, "river-tx-workers", 100, "River MaxWorkers, JobCompleteTx workload")
	riverTxPool := flag.Int("river-tx-pool", 20, "River pgxpool MaxConns, JobCompleteTx workload")
	flag.IntVar(&o.riverNoop.MaxWorkers, "river-noop-workers", 2000, "River MaxWorkers, no-op workload")
	riverNoopPool := flag.Int("river-noop-pool", 20, "River pgxpool MaxConns, no-op workload")
	flag.IntVar(&o.rawClient, "raw-clients", 4, "raw SQL drain clients")
	flag.StringVar(&o.outbox.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS JetStream server of the outbox benchmark (each run creates a stream of its own and deletes it)")
	flag.StringVar(&o.outbox.AMQPURL, "amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ server of the outbox benchmark (each run declares a queue of its own and deletes it)")
	flag.IntVar(&o.outboxN, "outbox-n", 0, "events per outbox drain (default 20000; quick 3000)")
	flag.IntVar(&o.outbox.Workers, "outbox-workers", 0, "outbox benchmark: the relay's Concurrency and the raw loop's loops (0: the relay's default, 2)")
	flag.IntVar(&o.outboxAB, "outbox-ab", 0, "run only this many interleaved pairs of relay drains (--outbox-n events, to each broker): the claim pipelined (the relay's) against the claim in an explicit transaction, and print them")
	flag.IntVar(&o.outbox.Batch, "outbox-batch", 0, "outbox benchmark: events per claim of every system (0: the relay's default, 100)")
	flag.StringVar(&o.citusURL, "citus-url", "", "run only the txinbox drains (single and batch handler) on --database-url and on this Citus coordinator (tables distributed by consumer), alternating, and print the table")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof); combine with --outbox-ab, --trace or --only to profile one benchmark")
	flag.Parse()

	o.riverTx.PoolConns, o.riverNoop.PoolConns = int32(*riverTxPool), int32(*riverNoopPool)
	o.riverTx.Tx = true
	for _, c := range []*bench.RiverConfig{&o.riverTx, &o.riverNoop} {
		// The values River's own benchmark (riverbench) uses.
		c.FetchCooldown, c.FetchPollInterval = 2*time.Millisecond, 20*time.Millisecond
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.only[s] = true
		}
	}
	if o.runs == 0 {
		o.runs = 3
		if o.quick {
			o.runs = 1
		}
	}
	if o.n == 0 {
		o.n = 100_000
		if o.quick {
			o.n = 20_000
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := profiled(*cpuProfile, func() error { return run(ctx, o) })
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "txbench:", err)
		os.Exit(1)
	}
}

// profiled runs f, writing a CPU profile of it to file unless file is "".
func profiled(file string, f func() error) error {
	if file == "" {
		return f()
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		return err
	}
	ferr := f()
	pprof.StopCPUProfile()
	return errors.Join(ferr, out.Close())
}

func command() string {
	args := make([]string, 0, len(os.Args))
	for _, a := range os.Args[1:] {
		args = append(args, shellQuote(a))
	}
	cmd := "cd bench && go run ./cmd/txbench"
	if len(args) > 0 {
		cmd += " " + strings.Join(args, " ")
	}
	if os.Getenv("BENCH_QUICK") == "1" {
		cmd = "BENCH_QUICK=1 " + cmd
	}
	return cmd
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./:,@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func run(ctx context.Context, o options) error {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	env, err := bench.NewEnv(ctx, o.url, o.quick, log)
	if err != nil {
		return err
	}
	defer env.Close()
	if err := env.LockRuns(ctx); err != nil {
		return err
	}
	if err := env.DropStale(ctx); err != nil {
		return err
	}
	machine, err := env.DescribeMachine(ctx)
	if err != nil {
		return err
	}
	r := &report{opts: o, machine: machine, command: command(), started: time.Now(), loadBefore: env.SampleLoad(ctx),
		noise: map[string][]string{}, done: map[string]bool{}}
	if o.out != "" {
		r.chartDir = filepath.Join(filepath.Dir(o.out), "charts")
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Since(r.started).Round(time.Second), fmt.Sprintf(format, args...))
	}
	if o.citusURL != "" {
		return runCitus(ctx, o, env, log, progress)
	}
	if o.outboxAB > 0 {
		return outboxAB(ctx, o, env, progress)
	}
	if o.trace && len(o.only) == 1 && o.only["outbox"] {
		return traceOutbox(ctx, o, env)
	}
	if o.trace {
		st := bench.NewStatementStats()
		env.Tracer = st
		rate, fp, err := env.InboxDrain(ctx, o.n, 0, o.inbox)
		if err != nil {
			return err
		}
		fmt.Printf("txinbox drain of %d messages (%s): %.0f msg/s, CPU %.0f µs/msg client + %.0f server\n\n", o.n, o.inbox, rate,
			fp.ClientCPU*1e6/float64(o.n), fp.ServerCPU*1e6/float64(o.n))
		st.Write(os.Stdout, o.n)
		return nil
	}
	runErr := r.runSelected(ctx, env, progress)
	// The sections of the benchmarks that completed are written even when a later one failed or the
	// run was interrupted; every run describes its machine; the sections it did not run keep theirs.
	sections := r.doneSections()
	if len(sections) == 0 {
		return runErr
	}
	sections = append([]string{"machine"}, sections...)
	r.elapsed = time.Since(r.started)
	r.loadAfter = env.SampleLoad(context.WithoutCancel(ctx))
	r.quietWaited = env.QuietWaited
	for _, section := range sections {
		md := r.markdown(section)
		fmt.Print(md)
		if o.out != "" {
			if err := bench.WriteSection(o.out, section, md); err != nil {
				return err
			}
		}
	}
	if o.out != "" {
		progress("wrote %s", o.out)
	}
	return runErr
}

// runSelected runs the benchmarks the options select, each under noted: the sustained drain, the
// tuning sweep, the seen-key cache, the coalesced receives, the recovery alone, or the main run
// (whose recovery rows run last).
func (r *report) runSelected(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	switch {
	case o.sustain > 0:
		progress("sustained drain for %s", o.sustain)
		return r.noted(env, "sustain", func() error {
			res, err := env.Sustain(ctx, o.sustain, o.inbox)
			r.sustain = &res
			return err
		})
	case o.tune:
		return r.noted(env, "tune", func() error { return r.runTune(ctx, env, progress) })
	case o.seen:
		return r.noted(env, "seen", func() error { return r.runSeen(ctx, env, progress) })
	case o.coalesce:
		if err := r.noted(env, "coalesce", func() error { return r.runCoalesce(ctx, env, progress) }); err != nil {
			return err
		}
		return r.noted(env, "coalesce-paced", func() error { return r.runCoalescePaced(ctx, env, progress) })
	case o.recovery:
		return r.noted(env, "recovery", func() error { return r.runRecovery(ctx, env, progress) })
	}
	if err := r.runMain(ctx, env, progress); err != nil {
		return err
	}
	if o.only["recovery"] {
		return r.noted(env, "recovery", func() error { return r.runRecovery(ctx, env, progress) })
	}
	return nil
}

// drainSystem is one system of the drain comparison.
type drainSystem struct {
	name, guarantee, config string
	run                     func(ctx context.Context) (float64, bench.Footprint, error)
	rates                   []float64
	fp                      bench.Footprint
	cpu                     []cpuPerMsg
}

// cpuPerMsg is the CPU time one message cost, microseconds.
type cpuPerMsg struct{ client, server float64 }

func perMsg(fp bench.Footprint, n int) cpuPerMsg {
	return cpuPerMsg{client: fp.ClientCPU * 1e6 / float64(n), server: fp.ServerCPU * 1e6 / float64(n)}
}

func (r *report) runMain(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	if o.only["drain"] {
		if err := r.noted(env, "drain", func() error { return r.runDrains(ctx, env, progress) }); err != nil {
			return err
		}
	}
	if o.only["ingest"] {
		if err := r.noted(env, "ingest", func() error { return r.runIngest(ctx, env, progress) }); err != nil {
			return err
		}
	}
	if o.only["latency"] {
		if err := r.noted(env, "latency", func() error { return r.runLatency(ctx, env, progress) }); err != nil {
			return err
		}
		if err := r.noted(env, "idle", func() error { return r.runIdle(ctx, env, progress) }); err != nil {
			return err
		}
	}
	if o.only["growth"] {
		if err := r.noted(env, "growth", func() error { return r.runGrowth(ctx, env, progress) }); err != nil {
			return err
		}
	}
	if o.only["outbox"] {
		if err := r.noted(env, "outbox", func() error { return r.runOutbox(ctx, env, progress) }); err != nil {
			return err
		}
	}
	return nil
}

// runDrains drains the same number of messages with every system, the runs interleaved.
func (r *report) runDrains(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	systems := []*drainSystem{
		{name: "txinbox", guarantee: "handler's ledger insert + completion in one transaction (batch of messages, one savepoint while none fails)",
			config: o.inbox.String(),
			run: func(ctx context.Context) (float64, bench.Footprint, error) {
				return env.InboxDrain(ctx, o.n, 0, o.inbox)
			}},
		{name: "txinbox, batch handler", guarantee: "handler's multi-row ledger insert + completion in one transaction (one call, one savepoint, per batch)",
			config: o.batchHandlerConfig().String(),
			run: func(ctx context.Context) (float64, bench.Footprint, error) {
				return env.InboxDrain(ctx, o.n, 0, o.batchHandlerConfig())
			}},
		{name: "River, JobCompleteTx", guarantee: "ledger insert + river.JobCompleteTx in one transaction per job",
			config: o.riverTx.String(),
			run: func(ctx context.Context) (float64, bench.Footprint, error) {
				return env.RiverDrain(ctx, o.n, o.riverTx)
			}},
		{name: "River, no-op", guarantee: "none (no ledger write; completion batched after the worker returns)",
			config: o.riverNoop.String(),
			run: func(ctx context.Context) (float64, bench.Footprint, error) {
				return env.RiverDrain(ctx, o.n, o.riverNoop)
			}},
		{name: "raw SQL, 1 per tx", guarantee: "claim + ledger insert + update in one transaction",
			config: fmt.Sprintf("%d clients, 1 message per transaction", o.rawClient),
			run: func(ctx context.Context) (float64, bench.Footprint, error) {
				return env.RawDrain(ctx, o.n, bench.RawConfig{Clients: o.rawClient, PerTx: 1})
			}},
		{name: "raw SQL, 100 per tx", guarantee: "claim + ledger insert + update in one transaction",
			config: fmt.Sprintf("%d clients, 100 messages per transaction", o.rawClient),
			run: func(ctx context.Context) (float64, bench.Footprint, error) {
				return env.RawDrain(ctx, o.n, bench.RawConfig{Clients: o.rawClient, PerTx: 100})
			}},
	}
	// Runs are interleaved (every system once, then again) so that background noise spreads
	// over all systems instead of hitting one.
	for run := 1; run <= o.runs; run++ {
		for _, s := range systems {
			progress("drain %d/%d: %s, %d messages", run, o.runs, s.name, o.n)
			rate, fp, err := s.run(ctx)
			if err != nil {
				return fmt.Errorf("drain %s: %w", s.name, err)
			}
			progress("  %.0f msg/s, peak RSS %.0f MiB, %d conns, CPU %.0f µs/msg client + %.0f server", rate, fp.PeakRSSMB, fp.MaxConns,
				fp.ClientCPU*1e6/float64(o.n), fp.ServerCPU*1e6/float64(o.n))
			s.rates = append(s.rates, rate)
			s.fp = maxFP(s.fp, fp)
			s.cpu = append(s.cpu, perMsg(fp, o.n))
		}
	}
	r.drain = systems
	return nil
}

// runIngest measures ReceiveMany against COPY with 1 and 4 clients.
func (r *report) runIngest(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	rows := 100_000
	if o.quick {
		rows = 20_000
	}
	for _, clients := range []int{1, 4} {
		for _, mode := range []bench.IngestMode{bench.IngestReceiveMany, bench.IngestCopyNew, bench.IngestCopyStaging} {
			row := &ingestRow{mode: mode, clients: clients}
			for run := 1; run <= o.runs; run++ {
				progress("ingest %d/%d: %s, %d clients, %d rows", run, o.runs, mode, clients, rows)
				res, err := env.Ingest(ctx, mode, clients, rows/1000/clients, 1000, 0.3)
				if err != nil {
					return fmt.Errorf("ingest %s: %w", mode, err)
				}
				progress("  %.0f rows/s (%d of %d new)", res.Rate, res.Inserted, res.Rows)
				row.rates = append(row.rates, res.Rate)
				row.cpu = append(row.cpu, perMsg(res.FP, res.Rows))
				row.last = res
				row.fp = maxFP(row.fp, res.FP)
			}
			r.ingest = append(r.ingest, row)
		}
	}
	return nil
}

// runLatency measures the latency from receive to handler start at a steady 1,000 messages/s.
func (r *report) runLatency(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	d := 30 * time.Second
	if o.quick {
		d = 4 * time.Second
	}
	r.latencyFor = d
	polling := o.inbox
	polling.NoListen = true
	for _, v := range []struct {
		cfg     bench.InboxConfig
		perCall int
	}{{o.inbox, 1}, {polling, 1}, {o.inbox, 10}} {
		progress("latency: 1000 msg/s, %d per call, for %s, %s", v.perCall, d, v.cfg)
		res, err := env.SteadyLatency(ctx, 1000, v.perCall, d, v.cfg)
		if err != nil {
			return err
		}
		progress("  p50 %s p95 %s p99 %s (achieved %.0f/s)", res.P50, res.P95, res.P99, res.Achieved)
		if b := res.Breakdown; b.Traced > 0 {
			progress("  slowest 1%%, mean %s: %s before the claim, %s claim, %s to RecordBatch, %s RecordBatch, %s to the handler; %.0f claims/s, %d of %d empty, %.1f rows per other; %d claims ran %d handlers; %.1f batch-mates before (slowest 1%%: %.1f)",
				b.TailTotal, b.Tail[0], b.Tail[1], b.Tail[2], b.Tail[3], b.Tail[4], b.ClaimsPerSec, b.EmptyClaims, b.Claims, b.PerClaim,
				b.HandledClaims, b.Handled, b.Before, b.TailBefore)
		}
		r.latency = append(r.latency, latencyRow{cfg: v.cfg, res: res})
	}
	// The raw SQL floor, with the pool's concurrency, batch size and fast poll.
	raw := bench.RawLatencyConfig{Clients: o.inbox.Concurrency, PerTx: o.inbox.BatchSize, Poll: 10 * time.Millisecond}
	progress("latency: 1000 msg/s, raw SQL, %+v, for %s", raw, d)
	res, err := env.RawLatency(ctx, 1000, d, raw)
	if err != nil {
		return err
	}
	progress("  p50 %s p95 %s p99 %s (achieved %.0f/s)", res.P50, res.P95, res.P99, res.Achieved)
	r.latency = append(r.latency, latencyRow{raw: &raw, res: res})
	return nil
}

// runIdle measures how long an idle pool takes to start the handler of one message received.
func (r *report) runIdle(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	idleSamples, pollSamples := 20, 6
	if o.quick {
		idleSamples, pollSamples = 5, 2
	}
	polling := o.inbox
	polling.NoListen = true
	for _, cfg := range []bench.InboxConfig{o.inbox, polling} {
		samples := idleSamples
		if cfg.NoListen {
			samples = pollSamples
		}
		progress("idle wake-up, %s, %d samples", cfg, samples)
		// Idle longer than the pool's fast polling after activity (1s): its runners are asleep.
		res, err := env.IdleWakeup(ctx, samples, 1200*time.Millisecond, cfg)
		if err != nil {
			return err
		}
		progress("  p50 %s max %s", res.P50, res.Max)
		r.idle = append(r.idle, res)
	}
	return nil
}

// runGrowth drains with more and more completed rows retained in the inbox.
func (r *report) runGrowth(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	levels := []int{0, 1_000_000, 10_000_000}
	if o.quick {
		levels = []int{0, 200_000}
	}
	progress("growth: drain %d with %v retained", o.n, levels)
	pts, err := env.InboxGrowth(ctx, o.n, levels, o.inbox)
	if err != nil {
		return err
	}
	for _, p := range pts {
		progress("  %d retained: %.0f msg/s", p.Retained, p.Rate)
	}
	r.growth = pts
	return nil
}

// runSeen compares a duplicate-heavy ingest without a seen-key cache, with the in-process LRU and
// with Redis, interleaving the runs.
func (r *report) runSeen(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	perClient := 20_000
	if r.opts.quick {
		perClient = 5_000
	}
	kinds := []bench.SeenCacheKind{bench.SeenNone, bench.SeenLRU, bench.SeenRedis}
	rows := make([]*seenRow, len(kinds))
	for i, k := range kinds {
		rows[i] = &seenRow{kind: k}
	}
	for run := 1; run <= r.opts.runs; run++ {
		for _, row := range rows {
			progress("seen %d/%d: %s, 4 clients, %d messages each", run, r.opts.runs, row.kind, perClient)
			res, err := env.SeenIngest(ctx, row.kind, r.opts.redis, 4, perClient, 0.8)
			if err != nil {
				return fmt.Errorf("seen %s: %w", row.kind, err)
			}
			progress("  %.0f msg/s, %.2f round trips/msg, %d of %d cached", res.Rate, res.RoundTrips, res.Cached, res.Messages)
			row.rates = append(row.rates, res.Rate)
			row.cpu = append(row.cpu, perMsg(res.FP, res.Messages))
			row.redisCPU = append(row.redisCPU, res.RedisCPU*1e6/float64(res.Messages))
			row.last = res
		}
	}
	r.seen = rows
	return nil
}

// runCoalesce compares single-message Receive calls from 32 goroutines with coalescing off and on,
// interleaving the runs.
func (r *report) runCoalesce(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	perSender := 1000
	if r.opts.quick {
		perSender = 200
	}
	rows := []*coalesceRow{{cfg: bench.CoalesceConfig{Off: true}}, {cfg: r.opts.coalesceOn}}
	for run := 1; run <= r.opts.runs; run++ {
		for _, row := range rows {
			progress("coalesce %d/%d: %s, %d goroutines × %d Receive", run, r.opts.runs, row.cfg, bench.CoalesceSenders, perSender)
			res, err := env.CoalesceLoop(ctx, row.cfg, perSender)
			if err != nil {
				return fmt.Errorf("coalesce %s: %w", row.cfg, err)
			}
			progress("  %.0f msg/s, %.2f round trips/msg, p50 %s p99 %s", res.Rate, res.Trips, res.P50, res.P99)
			row.rates = append(row.rates, res.Rate)
			row.cpu = append(row.cpu, perMsg(res.FP, res.Calls))
			row.last = res
		}
	}
	r.coalesce = rows
	return nil
}

// runCoalescePaced runs the coalescing configurations at a steady 1,000 calls/s.
func (r *report) runCoalescePaced(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	d := 20 * time.Second
	if r.opts.quick {
		d = 6 * time.Second
	}
	for _, row := range r.coalesce {
		progress("coalesce paced: %s, 1000 calls/s for %s", row.cfg, d)
		res, err := env.CoalescePaced(ctx, row.cfg, 1000, d)
		if err != nil {
			return fmt.Errorf("coalesce paced %s: %w", row.cfg, err)
		}
		progress("  achieved %.0f/s, p50 %s p99 %s max %s", res.Rate, res.P50, res.P99, res.Max)
		r.coalescePaced = append(r.coalescePaced, res)
	}
	return nil
}

func maxFP(a, b bench.Footprint) bench.Footprint {
	return bench.Footprint{PeakRSSMB: max(a.PeakRSSMB, b.PeakRSSMB), RSSExact: b.RSSExact, MaxConns: max(a.MaxConns, b.MaxConns)}
}

// runTune drains with a range of worker counts and batch sizes for each system.
func (r *report) runTune(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	n := r.opts.n
	add := func(system, config string, f func() (float64, bench.Footprint, error)) error {
		progress("tune %s: %s", system, config)
		rate, fp, err := f()
		if err != nil {
			return fmt.Errorf("tune %s %s: %w", system, config, err)
		}
		progress("  %.0f msg/s", rate)
		r.tune = append(r.tune, tuneRow{system: system, config: config, rate: rate, fp: fp, cpu: perMsg(fp, n)})
		return nil
	}
	for _, c := range []bench.InboxConfig{{Concurrency: 2, BatchSize: 64}, {Concurrency: 4, BatchSize: 32}, {Concurrency: 4, BatchSize: 64}, {Concurrency: 8, BatchSize: 64}} {
		if err := add("txinbox", c.String(), func() (float64, bench.Footprint, error) { return env.InboxDrain(ctx, n, 0, c) }); err != nil {
			return err
		}
	}
	for _, size := range []int{100, 200, 500} {
		c := r.opts.batchHandlerConfig()
		c.HandlerBatchSize = size
		if err := add("txinbox, batch handler", c.String(), func() (float64, bench.Footprint, error) { return env.InboxDrain(ctx, n, 0, c) }); err != nil {
			return err
		}
	}
	base := r.opts.riverTx
	for _, wp := range [][2]int{{20, 10}, {100, 20}, {200, 40}} {
		c := base
		c.MaxWorkers, c.PoolConns = wp[0], int32(wp[1])
		if err := add("River, JobCompleteTx", c.String(), func() (float64, bench.Footprint, error) { return env.RiverDrain(ctx, n, c) }); err != nil {
			return err
		}
	}
	base = r.opts.riverNoop
	for _, wp := range [][2]int{{1000, 10}, {2000, 10}, {2000, 20}} {
		c := base
		c.MaxWorkers, c.PoolConns = wp[0], int32(wp[1])
		if err := add("River, no-op", c.String(), func() (float64, bench.Footprint, error) { return env.RiverDrain(ctx, n, c) }); err != nil {
			return err
		}
	}
	for _, cl := range []int{4, 8} {
		for _, per := range []int{1, 100} {
			c := bench.RawConfig{Clients: cl, PerTx: per}
			if err := add("raw SQL", fmt.Sprintf("%d clients, %d per tx", cl, per), func() (float64, bench.Footprint, error) { return env.RawDrain(ctx, n, c) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// runCitus drains the same messages with txinbox on the single server of env and on the Citus
// coordinator o.citusURL (txinbox's tables distributed by consumer; one consumer, so one shard),
// alternating runs, and prints a markdown table of the medians (docs/scaling.md, "Beyond one node: Citus").
func runCitus(ctx context.Context, o options, single *bench.Env, log *slog.Logger, progress func(string, ...any)) error {
	citus, err := bench.NewEnv(ctx, o.citusURL, o.quick, log)
	if err != nil {
		return err
	}
	defer citus.Close()
	citus.Distribute = true
	if err := citus.LockRuns(ctx); err != nil {
		return err
	}
	if err := citus.DropStale(ctx); err != nil {
		return err
	}
	batch := o.inbox
	batch.HandlerBatchSize = o.inboxBatchHandler
	type row struct {
		name string
		env  *bench.Env
		cfg  bench.InboxConfig
		runs []float64
		cpu  []float64
	}
	rows := []*row{
		{name: "single PostgreSQL, single handler", env: single, cfg: o.inbox},
		{name: "Citus (coordinator + 2 workers), single handler", env: citus, cfg: o.inbox},
		{name: "single PostgreSQL, batch handler", env: single, cfg: batch},
		{name: "Citus (coordinator + 2 workers), batch handler", env: citus, cfg: batch},
	}
	for i := 0; i < o.runs; i++ {
		for _, r := range rows {
			progress("%s, run %d: draining %d messages", r.name, i+1, o.n)
			rate, fp, err := r.env.InboxDrain(ctx, o.n, 0, r.cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			r.runs = append(r.runs, rate)
			r.cpu = append(r.cpu, fp.ClientCPU*1e6/float64(o.n))
		}
	}
	fmt.Printf("Drain of %d messages of one consumer, %d run(s) each, alternating (`%s`):\n\n", o.n, o.runs, command())
	fmt.Println("| Where | Configuration | Runs (msg/s) | Median msg/s | Client CPU µs/msg (median) |")
	fmt.Println("|---|---|---|---:|---:|")
	for _, r := range rows {
		var runs []string
		for _, x := range r.runs {
			runs = append(runs, fmt.Sprintf("%.0f", x))
		}
		fmt.Printf("| %s | %s | %s | **%.0f** | %.0f |\n", r.name, r.cfg, strings.Join(runs, ", "), bench.Median(r.runs), bench.Median(r.cpu))
	}
	return nil
}
