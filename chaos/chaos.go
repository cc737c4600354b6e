// Package chaos runs txinbox under failure: worker processes killed with SIGKILL and restarted,
// database connections terminated from the server side, optionally the database server itself
// restarted, while producers deliver every message one to five times. At the end it checks that every
// message was applied exactly once. cmd/txchaos is its command line; the tests of this package run a
// short version, and one against a throwaway PostgreSQL server that they restart.
//
// Everything a run creates lives in one schema: the inbox tables, a ledger (one row per applied
// message, its key unique) and a balance (a row per worker process, the balance being their sum),
// which the handler increments in the same transaction as it writes the ledger row.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/retention"
)

// Config configures a chaos run. Zero fields take the documented defaults (those of the full run).
type Config struct {
	// URL is the PostgreSQL connection string. Required.
	URL string
	// Schema is the schema the run uses. Default: a fresh txchaos_<random>, dropped at the end unless
	// Keep is set. A schema given here is created if missing, migrated, and never dropped.
	Schema string
	// Keep keeps a generated schema after the run. A generated schema is also kept, for a
	// post-mortem, when an invariant fails.
	Keep bool
	// Messages is the number of unique messages that must be applied. Default: 50,000.
	Messages int
	// Poison is the number of poison messages (their handler always fails). Default: 10.
	Poison int
	// MaxCopies is the most deliveries of one message; each is delivered 1 to MaxCopies times.
	// Default: 5.
	MaxCopies int
	// Workers is the number of worker processes. Default: 4.
	Workers int
	// Producers is the number of producers (goroutines of this process, each with its own
	// connection). Default: 4.
	Producers int
	// Duration is the length of the chaos phase: producers spread their deliveries over it, and the
	// killer and the cutter run throughout (and on until the producers are done). Default: 5m.
	Duration time.Duration
	// Seed drives every random choice (messages, copies, order, victims, intervals). Default: the
	// current time. Timing still varies between runs.
	Seed uint64
	// KillMin and KillMax bound the random interval between two SIGKILLs of a random worker.
	// Default: 0.5s and 2s. NoKills disables the killer.
	KillMin, KillMax time.Duration
	NoKills          bool
	// CutMin and CutMax bound the random interval between two rounds of connection cuts (1 to 3
	// backends of workers or producers terminated with pg_terminate_backend). Default: 0.3s and 1.5s.
	// NoCuts disables the cutter.
	CutMin, CutMax time.Duration
	NoCuts         bool
	// RotateMin and RotateMax bound the random interval between two rotations of the inbox's
	// generations (retention.Rotate, migration 00006), which copy every unfinished and
	// completed message of the retired generation forward while receives and workers go on. Default:
	// 2s and 6s. NoRotations disables the rotator.
	RotateMin, RotateMax time.Duration
	NoRotations          bool
	// Restarts is how many times RestartServer is called, evenly spread over the chaos phase.
	Restarts int
	// RestartServer restarts the database server (the restart test uses pg_ctl restart -m fast).
	RestartServer func(ctx context.Context) error
	// DrainTimeout bounds, after the chaos phase, how long the wait for every message to be completed
	// or dead may go without progress (no message newly stored, completed or dead): a drain that moves
	// on is never cut short. It also bounds, beyond Duration, the producers. Default: Duration, and
	// at least 3m.
	DrainTimeout time.Duration
	// WorkerCommand is the argv that starts a worker process; WorkerEnv is added to its environment.
	// Default: this executable with the argument "worker".
	WorkerCommand []string
	// LogDir receives each worker's standard error (worker-<n>.log). Default: a new temporary
	// directory, reported in Report.LogDir.
	LogDir string
	// Progress, if set, receives a line every few seconds while the run goes on.
	Progress io.Writer

	// Worker pool settings. Defaults: Concurrency 1, BatchSize 4, Lease 3s, Timeout 1s,
	// PollInterval 20ms, PoisonMaxAttempts 3. A SIGKILL leaves up to Concurrency x BatchSize claimed
	// messages, which the pools then run as suspects, one at a time across all processes (8 to 25 a
	// second on a loaded 2-core machine): with a kill every 1.25 s on average, that product must stay
	// small or the suspects pile up faster than they are run.
	Concurrency       int
	BatchSize         int
	Lease             time.Duration
	Timeout           time.Duration
	PollInterval      time.Duration
	PoisonMaxAttempts int
}

// ShortDrainTimeout is the DrainTimeout of Short: the producers may go on for Duration plus
// DrainTimeout, and the drain fails once it has made no progress for DrainTimeout. A stuck short run
// ends within 15 s + 2 x 20 s = 55 s plus set-up and checks; a slow one drains for as long as it
// moves on.
const ShortDrainTimeout = 20 * time.Second

// Short returns the configuration of the short run of `make test`: 5,000 messages, 15 seconds of
// chaos, and a run that fails if, after the chaos, ShortDrainTimeout passes with no message
// completed or dead while some are left.
func Short(url string) Config {
	return Config{URL: url, Messages: 5000, Poison: 5, Duration: 15 * time.Second, DrainTimeout: ShortDrainTimeout}
}

func (c Config) withDefaults() (Config, error) {
	if c.URL == "" {
		return c, errors.New("chaos: no database URL")
	}
	if c.Schema != "" {
		if err := txinbox.ValidateSchema(c.Schema); err != nil {
			return c, err
		}
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Messages, 50000)
	if c.Poison < 0 {
		c.Poison = 0
	} else if c.Poison == 0 {
		c.Poison = 10
	}
	def(&c.MaxCopies, 5)
	def(&c.Workers, 4)
	def(&c.Producers, 4)
	def(&c.Concurrency, 1)
	def(&c.BatchSize, 4)
	def(&c.PoisonMaxAttempts, 3)
	defd(&c.Duration, 5*time.Minute)
	defd(&c.KillMin, 500*time.Millisecond)
	defd(&c.KillMax, 2*time.Second)
	defd(&c.CutMin, 300*time.Millisecond)
	defd(&c.CutMax, 1500*time.Millisecond)
	defd(&c.RotateMin, 2*time.Second)
	defd(&c.RotateMax, 6*time.Second)
	defd(&c.DrainTimeout, max(3*time.Minute, c.Duration))
	defd(&c.Lease, 3*time.Second)
	defd(&c.Timeout, time.Second)
	defd(&c.PollInterval, 20*time.Millisecond)
	if c.KillMax < c.KillMin {
		c.KillMax = c.KillMin
	}
	if c.CutMax < c.CutMin {
		c.CutMax = c.CutMin
	}
	if c.RotateMax < c.RotateMin {
		c.RotateMax = c.RotateMin
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Restarts > 0 && c.RestartServer == nil {
		return c, errors.New("chaos: Restarts set without RestartServer")
	}
	if len(c.WorkerCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return c, err
		}
		c.WorkerCommand = []string{exe, "worker"}
	}
	return c, nil
}

// Report is the outcome of a run: figures, and the invariants that failed (none if OK).
type Report struct {
	Schema     string
	SchemaKept bool // a generated schema was kept (Keep, or a failed run)
	Seed       uint64
	LogDir     string

	Messages   int // unique messages that must be applied once
	Poison     int // poison messages that must end dead
	Deliveries int // receives of those messages, duplicates included
	Duplicates int // Deliveries minus unique messages: redeliveries the inbox must absorb

	Inserted      int64 // receipts reporting Inserted
	DupReceipts   int64 // receipts reporting Duplicate
	Conflicts     int64 // receipts reporting Conflict (must be 0)
	Resends       int64 // receives re-sent after an error (outcome unknown)
	ReceiveErrors int64 // errors seen by producers (each followed by a re-send)

	Kills           int64 // worker processes killed with SIGKILL (each restarted)
	UnexpectedExits int64 // worker processes that exited without being killed (must be 0)
	CutsWorker      int64 // worker connections terminated by the server
	CutsProducer    int64 // producer connections terminated by the server
	ServerRestarts  int64 // database server restarts
	Rotations       int64 // generations begun by the rotator (retention.Rotate)
	RotationErrors  int64 // rotations that failed (a lock wait timed out, a cut connection), retried later
	// CompletedAfterRestart counts the messages completed after the last server restart: the
	// workers reconnected.
	CompletedAfterRestart int64
	RetriedMessages       int64 // completed messages that needed more than one attempt
	MaxAttemptsCredit     int64 // most attempts started by one completed message

	Completed, Dead int64
	LedgerRows      int64
	LedgerSum       int64
	ExpectedSum     int64
	Balance         int64

	ChaosPhase time.Duration // from the first delivery to the end of the chaos
	Drain      time.Duration // from the end of the chaos until nothing was left to do
	Total      time.Duration

	Failures []string // invariants that failed
}

// OK reports whether every invariant held.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

func (r *Report) failf(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Print writes the report in a human-readable form.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "txchaos: schema %s, seed %d, worker logs in %s\n", r.Schema, r.Seed, r.LogDir)
	fmt.Fprintf(w, "  messages            %d unique + %d poison, %d deliveries (%d duplicates)\n", r.Messages, r.Poison, r.Deliveries, r.Duplicates)
	fmt.Fprintf(w, "  receipts            %d inserted, %d duplicate, %d conflict; %d receives re-sent after %d errors\n", r.Inserted, r.DupReceipts, r.Conflicts, r.Resends, r.ReceiveErrors)
	fmt.Fprintf(w, "  chaos survived      %d SIGKILLs (restarted), %d worker + %d producer connections cut, %d server restarts\n", r.Kills, r.CutsWorker, r.CutsProducer, r.ServerRestarts)
	fmt.Fprintf(w, "  rotations           %d generations begun (%d attempts failed and were retried)\n", r.Rotations, r.RotationErrors)
	if r.ServerRestarts > 0 {
		fmt.Fprintf(w, "  after the restarts  %d messages completed after the last one\n", r.CompletedAfterRestart)
	}
	fmt.Fprintf(w, "  outcome             %d completed (%d needed more than one attempt, at most %d), %d dead\n", r.Completed, r.RetriedMessages, r.MaxAttemptsCredit, r.Dead)
	fmt.Fprintf(w, "  ledger              %d rows, sum %d, balance %d, expected %d\n", r.LedgerRows, r.LedgerSum, r.Balance, r.ExpectedSum)
	fmt.Fprintf(w, "  duration            %v chaos + %v drain = %v\n", r.ChaosPhase.Round(time.Millisecond), r.Drain.Round(time.Millisecond), r.Total.Round(time.Millisecond))
	if r.UnexpectedExits > 0 {
		fmt.Fprintf(w, "  unexpected exits    %d\n", r.UnexpectedExits)
	}
	if r.OK() {
		fmt.Fprintln(w, "  PASS: every message applied exactly once, nothing pending or processing, dead letters = poison set")
		return
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  FAIL: %s\n", f)
	}
	if r.SchemaKept {
		fmt.Fprintf(w, "  schema %s kept for inspection (DROP SCHEMA %s CASCADE when done)\n", r.Schema, r.Schema)
	}
}

// message is one unique message of the run.
type message struct {
	key, kind string
	payload   []byte
	amount    int64
}

// runner is the state of one run.
type runner struct {
	cfg         Config
	rep         *Report
	control     *pgxpool.Pool // checks and cuts; never cut itself
	runID       string
	msgs        []message
	slots       []*slot
	stopping    *atomic.Bool // set when the workers are being stopped for good
	kills       atomic.Int64
	crashes     atomic.Int64
	cutsW       atomic.Int64
	cutsP       atomic.Int64
	restart     atomic.Int64
	rotations   atomic.Int64
	rotateErrs  atomic.Int64
	lastRestart atomic.Int64 // unix nanoseconds when the last server restart finished
	recv        recvStats
	log         *slog.Logger
}

// Run performs a chaos run. It returns an error when the run could not be carried out (no database,
// for example); invariant failures are reported in Report.Failures.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	r := &runner{cfg: cfg, rep: &Report{Seed: cfg.Seed}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if cfg.Progress != nil {
		r.log = slog.New(slog.NewTextHandler(cfg.Progress, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	r.runID = hex.EncodeToString(b)
	if cfg.Schema == "" {
		cfg.Schema = "txchaos_" + r.runID
		r.cfg.Schema = cfg.Schema
		defer func() {
			if !cfg.Keep && r.rep.OK() {
				r.dropSchema()
			} else {
				r.rep.SchemaKept = true
			}
		}()
	}
	r.rep.Schema = cfg.Schema
	if cfg.LogDir == "" {
		if cfg.LogDir, err = os.MkdirTemp("", "txchaos-logs-"); err != nil {
			return nil, err
		}
		r.cfg.LogDir = cfg.LogDir
	}
	r.rep.LogDir = cfg.LogDir

	pcfg, err := poolConfig(cfg.URL, r.appName("control"), 4)
	if err != nil {
		return nil, err
	}
	if r.control, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	defer r.control.Close()
	if err := r.setup(ctx, pcfg.ConnConfig); err != nil {
		return nil, err
	}
	r.generate()

	// Workers first, so that they are busy (and killable) from the first delivery on.
	r.startWorkers()
	defer r.stopWorkers()

	chaosStart := time.Now()
	chaosCtx, endChaos := context.WithCancel(ctx)
	defer endChaos()
	var chaosWG sync.WaitGroup
	if !cfg.NoKills {
		chaosWG.Go(func() { r.killer(chaosCtx) })
	}
	if !cfg.NoCuts {
		chaosWG.Go(func() { r.cutter(chaosCtx) })
	}
	if cfg.Restarts > 0 {
		chaosWG.Go(func() { r.restarter(chaosCtx, chaosStart) })
	}
	if !cfg.NoRotations {
		chaosWG.Go(func() { r.rotator(chaosCtx) })
	}
	progressCtx, endProgress := context.WithCancel(ctx)
	defer endProgress()
	progressDone := make(chan struct{})
	go r.progress(progressCtx, progressDone)

	prodCtx, cancelProd := context.WithTimeout(ctx, cfg.Duration+cfg.DrainTimeout)
	defer cancelProd()
	perr := r.produce(prodCtx, chaosStart)
	// The chaos lasts at least Duration, and as long as the producers need.
	select {
	case <-time.After(time.Until(chaosStart.Add(cfg.Duration))):
	case <-ctx.Done():
	}
	endChaos()
	chaosWG.Wait()
	r.rep.ChaosPhase = time.Since(chaosStart)
	if perr != nil {
		r.rep.failf("producers: %v", perr)
	}

	drainStart := time.Now()
	if err := r.drain(ctx); err != nil {
		r.rep.failf("drain: %v", err)
	}
	r.rep.Drain = time.Since(drainStart)
	endProgress()
	<-progressDone
	r.stopWorkers()

	r.rep.Kills, r.rep.UnexpectedExits = r.kills.Load(), r.crashes.Load()
	r.rep.CutsWorker, r.rep.CutsProducer, r.rep.ServerRestarts = r.cutsW.Load(), r.cutsP.Load(), r.restart.Load()
	r.rep.Rotations, r.rep.RotationErrors = r.rotations.Load(), r.rotateErrs.Load()
	r.rep.Inserted, r.rep.DupReceipts, r.rep.Conflicts = r.recv.inserted.Load(), r.recv.duplicate.Load(), r.recv.conflict.Load()
	r.rep.Resends, r.rep.ReceiveErrors = r.recv.resends.Load(), r.recv.errors.Load()
	if err := r.verify(ctx); err != nil {
		return r.rep, err
	}
	r.rep.Total = time.Since(start)
	return r.rep, nil
}

// appName is the application_name of this run's connections of the given role.
func (r *runner) appName(role string) string { return "txchaos-" + r.runID + "-" + role }

func (r *runner) setup(ctx context.Context, cc *pgx.ConnConfig) error {
	m, err := migrate.New(ctx, cc, txinbox.Store{Schema: r.cfg.Schema}, nil)
	if err != nil {
		return fmt.Errorf("chaos: migrate %s: %w", r.cfg.Schema, err)
	}
	_, err = m.Up(ctx)
	_ = m.Close()
	if err != nil {
		return fmt.Errorf("chaos: migrate %s: %w", r.cfg.Schema, err)
	}
	s := pgx.Identifier{r.cfg.Schema}.Sanitize()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"CREATE TABLE " + s + ".chaos_ledger (key text PRIMARY KEY, message_id bigint NOT NULL, amount bigint NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())", nil},
		{"CREATE TABLE " + s + ".chaos_balance (shard int PRIMARY KEY, total bigint NOT NULL, applied bigint NOT NULL)", nil},
		{"INSERT INTO " + s + ".chaos_balance SELECT generate_series(0, $1::int - 1), 0, 0", []any{r.cfg.Workers}},
	} {
		if _, err := r.control.Exec(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("chaos: setup: %w", err)
		}
	}
	return nil
}

func (r *runner) dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, r.cfg.URL)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{r.cfg.Schema}.Sanitize()+" CASCADE")
}

// generate makes the messages: Messages credits with random amounts, then Poison poison messages.
func (r *runner) generate() {
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 1))
	for i := range r.cfg.Messages {
		amount := 1 + rng.Int64N(1000)
		p, _ := json.Marshal(creditPayload{Seq: i, Amount: amount})
		r.msgs = append(r.msgs, message{key: fmt.Sprintf("m-%07d", i), kind: KindCredit, payload: p, amount: amount})
		r.rep.ExpectedSum += amount
	}
	for i := range r.cfg.Poison {
		p, _ := json.Marshal(map[string]int{"poison": i})
		r.msgs = append(r.msgs, message{key: fmt.Sprintf("poison-%03d", i), kind: KindPoison, payload: p})
	}
	r.rep.Messages, r.rep.Poison = r.cfg.Messages, r.cfg.Poison
}

// slot is one worker process position: the process in it is killed and replaced.
type slot struct {
	n      int
	mu     sync.Mutex
	cmd    *exec.Cmd
	killed bool // the current process was sent SIGKILL by the killer
	done   chan struct{}
}

func (r *runner) startWorkers() {
	stopping := &atomic.Bool{}
	for n := range r.cfg.Workers {
		s := &slot{n: n, done: make(chan struct{})}
		r.slots = append(r.slots, s)
		go r.supervise(s, stopping)
	}
	r.stopping = stopping
}

// supervise keeps a worker process running in slot s until the run stops it.
func (r *runner) supervise(s *slot, stopping *atomic.Bool) {
	defer close(s.done)
	spec, _ := json.Marshal(workerSpec{
		URL: r.cfg.URL, Schema: r.cfg.Schema, AppName: r.appName(fmt.Sprintf("worker-%d", s.n)), Shard: s.n,
		Concurrency: r.cfg.Concurrency, BatchSize: r.cfg.BatchSize, Lease: r.cfg.Lease, Timeout: r.cfg.Timeout,
		PollInterval: r.cfg.PollInterval, PoisonMaxAttempts: r.cfg.PoisonMaxAttempts,
	})
	logf, err := os.OpenFile(filepath.Join(r.cfg.LogDir, fmt.Sprintf("worker-%d.log", s.n)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.log.Error("worker log", "err", err)
		logf = nil
	}
	if logf != nil {
		defer logf.Close()
	}
	for !stopping.Load() {
		cmd := exec.Command(r.cfg.WorkerCommand[0], r.cfg.WorkerCommand[1:]...)
		cmd.Env = append(os.Environ(), WorkerEnv+"="+string(spec))
		if logf != nil {
			cmd.Stdout, cmd.Stderr = logf, logf
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		s.mu.Lock()
		err := cmd.Start()
		if err == nil {
			s.cmd, s.killed = cmd, false
		}
		s.mu.Unlock()
		if err != nil {
			r.crashes.Add(1)
			r.log.Error("start worker", "slot", s.n, "err", err)
			time.Sleep(time.Second)
			continue
		}
		err = cmd.Wait()
		s.mu.Lock()
		killed := s.killed
		s.cmd = nil
		s.mu.Unlock()
		switch {
		case killed:
			r.kills.Add(1)
		case stopping.Load() && (err == nil || diedOf(err, syscall.SIGTERM)):
			// A graceful stop; or the stop's SIGTERM reached a worker restarted an instant before,
			// ahead of its signal handler, and ended it: our doing, not a crash.
		default:
			r.crashes.Add(1)
			r.log.Error("worker exited unexpectedly", "slot", s.n, "err", err)
		}
	}
}

// diedOf reports whether err, from exec.Cmd.Wait, says the process was ended by sig.
func diedOf(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// stopWorkers stops every worker gracefully (SIGTERM), killing those that do not exit in 15 seconds.
// Calling it again does nothing.
func (r *runner) stopWorkers() {
	if r.stopping == nil || r.stopping.Swap(true) {
		return
	}
	for _, s := range r.slots {
		s.mu.Lock()
		if s.cmd != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
		}
		s.mu.Unlock()
	}
	deadline := time.After(15 * time.Second)
	for _, s := range r.slots {
		select {
		case <-s.done:
		case <-deadline:
			s.mu.Lock()
			if s.cmd != nil {
				_ = s.cmd.Process.Kill()
			}
			s.mu.Unlock()
			<-s.done
		}
	}
}

// sleepRand sleeps a random duration in [lo, hi] or until ctx ends (false).
func sleepRand(ctx context.Context, rng *mrand.Rand, lo, hi time.Duration) bool {
	d := lo
	if hi > lo {
		d += time.Duration(rng.Int64N(int64(hi - lo)))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// rotator begins a new generation of the inbox every RotateMin to RotateMax (retention.Rotate with
// Force, on the control pool, which the cutter spares): with the default 7-day Retention nothing expires, so
// every rotation copies the whole generation it retires (pending, claimed, completed and dead
// messages) while producers receive and workers run and are killed.
func (r *runner) rotator(ctx context.Context) {
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 5))
	store := txinbox.Store{DB: r.control, Schema: r.cfg.Schema}
	for sleepRand(ctx, rng, r.cfg.RotateMin, r.cfg.RotateMax) {
		rot, err := retention.Rotate(ctx, store, retention.RotateOptions{Force: true})
		switch {
		case err != nil:
			r.rotateErrs.Add(1)
		case rot.Rotated:
			r.rotations.Add(1)
			r.log.Info("txinbox: rotated generations", "generation", rot.Generation, "copied", rot.Copied, "duration", rot.Duration)
		}
	}
}

// killer sends SIGKILL to a random worker every KillMin to KillMax; its supervisor restarts it.
func (r *runner) killer(ctx context.Context) {
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 2))
	for sleepRand(ctx, rng, r.cfg.KillMin, r.cfg.KillMax) {
		s := r.slots[rng.IntN(len(r.slots))]
		s.mu.Lock()
		if s.cmd != nil && !s.killed {
			if err := s.cmd.Process.Kill(); err == nil {
				s.killed = true
			}
		}
		s.mu.Unlock()
	}
}

// cutter terminates 1 to 3 random connections of this run's workers and producers, from the server
// side, every CutMin to CutMax.
func (r *runner) cutter(ctx context.Context) {
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 3))
	wp, pp := r.appName("worker-"), r.appName("producer-")
	for sleepRand(ctx, rng, r.cfg.CutMin, r.cfg.CutMax) {
		rows, err := r.control.Query(ctx, `SELECT pid, starts_with(application_name, $1) FROM pg_stat_activity
			WHERE (starts_with(application_name, $1) OR starts_with(application_name, $2)) AND pid <> pg_backend_pid()`, wp, pp)
		if err != nil {
			continue // the server may be restarting
		}
		type backend struct {
			pid    int32
			worker bool
		}
		bs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (backend, error) {
			var b backend
			return b, row.Scan(&b.pid, &b.worker)
		})
		if err != nil || len(bs) == 0 {
			continue
		}
		rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		for _, b := range bs[:min(len(bs), 1+rng.IntN(3))] {
			var ok bool
			if err := r.control.QueryRow(ctx, "SELECT pg_terminate_backend($1)", b.pid).Scan(&ok); err == nil && ok {
				if b.worker {
					r.cutsW.Add(1)
				} else {
					r.cutsP.Add(1)
				}
			}
		}
	}
}

// restarter restarts the server Restarts times, evenly spread over the chaos phase.
func (r *runner) restarter(ctx context.Context, start time.Time) {
	n := r.cfg.Restarts
	for k := 1; k <= n; k++ {
		at := start.Add(r.cfg.Duration * time.Duration(k) / time.Duration(n+1))
		select {
		case <-time.After(time.Until(at)):
		case <-ctx.Done():
			return
		}
		if err := r.cfg.RestartServer(context.WithoutCancel(ctx)); err != nil {
			r.log.Error("server restart failed", "err", err)
			continue
		}
		r.restart.Add(1)
		r.lastRestart.Store(time.Now().UnixNano())
		r.log.Info("server restarted", "restarts", r.restart.Load())
	}
}

// progress logs a line every 5 seconds until ctx ends.
func (r *runner) progress(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if r.cfg.Progress == nil {
		return
	}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var completed, left, suspects int64
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := r.control.QueryRow(qctx, "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state IN ('pending', 'processing')), "+
			"(SELECT count(*) FROM "+pgx.Identifier{r.cfg.Schema, "inbox_queue"}.Sanitize()+" WHERE isolate > 0) FROM "+
			pgx.Identifier{r.cfg.Schema, "inbox"}.Sanitize()).Scan(&completed, &left, &suspects)
		cancel()
		if err != nil {
			completed, left, suspects = -1, -1, -1
		}
		r.log.Info("chaos", "delivered", r.recv.delivered.Load(), "completed", completed, "to_do", left, "suspects", suspects,
			"kills", r.kills.Load(), "cuts", r.cutsW.Load()+r.cutsP.Load(), "restarts", r.restart.Load())
	}
}

// drain waits until every message is received, and completed or dead, with nothing queued. It waits
// as long as the work moves on: it fails only when DrainTimeout passes with no progress (no message
// newly stored, completed or dead), and then says how far the drain got and at what rate, so that a
// machine too slow to keep up can be told from a stuck run.
func (r *runner) drain(ctx context.Context) error {
	want := int64(len(r.msgs))
	start := time.Now()
	inboxT, queueT := pgx.Identifier{r.cfg.Schema, "inbox"}.Sanitize(), pgx.Identifier{r.cfg.Schema, "inbox_queue"}.Sanitize()
	var total, open, queued, suspects int64
	first, best := int64(-1), int64(-1) // finished (completed or dead) plus stored messages: at the start, and the most seen
	lastProgress := start
	for {
		err := r.control.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+inboxT+"), (SELECT count(*) FROM "+inboxT+
			" WHERE state IN ('pending', 'processing')), (SELECT count(*) FROM "+queueT+"), (SELECT count(*) FROM "+queueT+
			" WHERE isolate > 0)").Scan(&total, &open, &queued, &suspects)
		if err == nil && total == want && open == 0 && queued == 0 {
			return nil
		}
		if err == nil {
			if progress := total + total - open; progress > best {
				if first < 0 {
					first = progress
				}
				best, lastProgress = progress, time.Now()
			}
		}
		if quiet := time.Since(lastProgress); quiet > r.cfg.DrainTimeout {
			elapsed := time.Since(start)
			return fmt.Errorf("no progress for %v (%v into the drain): %d of %d messages stored, %d pending or processing, %d queued, "+
				"of which %d suspects (their batch never finished; taken over by the rescuer); %.1f messages stored or finished a second "+
				"during the drain; a machine too slow for the run, or a stuck run (last error: %v)",
				quiet.Round(time.Second), elapsed.Round(time.Second), total, want, open, queued, suspects,
				float64(max(best-first, 0))/elapsed.Seconds(), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
