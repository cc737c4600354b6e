package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// Recovery after a crash: a process holding claims is killed with SIGKILL, and a fresh process (the
// service restarted by its orchestrator) takes them over when their lease ends. Both are this
// program, re-executed in a child mode (RecoveryChild).

// RecoveryLease is the worker.Config.Lease of the recovery rows. Their Config.Timeout is half of it
// (a Timeout must be less than the Lease, and the default, 30 s, is not); every other setting is the
// default.
const RecoveryLease = 10 * time.Second

// The worker's defaults that the recovery rows run at and count with (worker.Config and
// worker.HandlerConfig document them: Concurrency 4, BatchSize 32, a batch handler's BatchSize 500,
// MaxAttempts 10). The pools are made with zero values, so these only label and size the rows.
const (
	WorkerConcurrency      = 4
	WorkerBatchSize        = 32
	WorkerHandlerBatchSize = 500
	WorkerMaxAttempts      = 10
)

// RecoveryChildEnv is the environment variable that makes the program a child of Env.Recovery: its
// value is the mode given to RecoveryChild.
const RecoveryChildEnv = "TXBENCH_RECOVERY_CHILD"

// RecoveryConfig is one recovery row.
type RecoveryConfig struct {
	// Batch registers the handler with worker.HandleBatch at the default HandlerConfig (BatchSize
	// 500); otherwise with worker.Handle. The pool has the default Concurrency and BatchSize.
	Batch bool
	// N is the number of messages, every one claimed by the killed process.
	N int
	// Poison makes the handler of one message kill its own process (SIGKILL); the process is started
	// again after each crash.
	Poison bool
}

// Reference is the pool configuration of the recovery's processes, for a normal drain (InboxDrain)
// of the same messages.
func (c RecoveryConfig) Reference() InboxConfig {
	cfg := InboxConfig{Concurrency: WorkerConcurrency, BatchSize: WorkerBatchSize}
	if c.Batch {
		cfg.HandlerBatchSize = WorkerHandlerBatchSize
	}
	return cfg
}

// ClaimSize is the size of each claim of the killed process: HandlerConfig.BatchSize of a batch
// handler, Config.BatchSize of a single handler (the defaults).
func (c RecoveryConfig) ClaimSize() int {
	if c.Batch {
		return WorkerHandlerBatchSize
	}
	return WorkerBatchSize
}

// ExpectedCrashes is how many times the poison should kill its process: the takeovers halve the
// group of its killed claim (ClaimSize) down to a group of two, each crashing (⌈log2(ClaimSize)⌉ - 1
// crashes), then it runs alone once per attempt left after the killed claim's (MaxAttempts - 1: the
// crashes of groups count one attempt in all, charged by the first takeover).
func (c RecoveryConfig) ExpectedCrashes() int {
	return int(math.Ceil(math.Log2(float64(c.ClaimSize())))) - 1 + WorkerMaxAttempts - 1
}

// poison returns the number of the poison message (0: none).
func (c RecoveryConfig) poison() int {
	if !c.Poison {
		return 0
	}
	return c.N * 2 / 3
}

// Takeover is one takeover by a recovering process, from its Warn line "txinbox: taking over
// messages ...".
type Takeover struct {
	At       time.Time // the line's time
	Messages int
}

// RecoveryResult is what Env.Recovery measured. Times are the server's clock (the server runs on this
// machine: the child processes' log times are on the same clock).
type RecoveryResult struct {
	Config RecoveryConfig
	// Claims is the number of batches the killed process held (their inbox_batch rows), Held their
	// messages.
	Claims, Held int
	// Killed is the kill: the server's now() just before it. The killed batches' transactions end
	// with the process, so their messages can be taken over from then on (there is no lease to wait).
	Killed time.Time
	// Applied runs from Killed to the completion (completed_at, the finishing statement's now()) of
	// the last message applied, the poison excepted.
	Applied time.Duration
	// PoisonDead runs from Killed to the poison's completed_at (state dead); 0 without a poison.
	PoisonDead time.Duration
	// PoisonAttempts is the poison's attempts_started when it was declared dead.
	PoisonAttempts int
	// Crashes is the number of recovering processes the poison killed.
	Crashes int
	// Takeovers lists the takeovers of the recovering processes, in order.
	Takeovers []Takeover
}

// Recovery receives cfg.N messages, starts a child process whose pool claims them all and blocks in
// its handlers (their ledger rows written, not committed), kills it with SIGKILL once its batches
// list every message, and at once starts a fresh child process that handles them (charging the
// killed batches and taking their messages over) and exits when the queue is empty; a child killed
// by the poison is started again at once, until one exits. It then checks the ledger: one row per
// message applied, none of the poison.
func (e *Env) Recovery(ctx context.Context, cfg RecoveryConfig) (RecoveryResult, error) {
	res := RecoveryResult{Config: cfg}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	s, err := e.newInboxSchema(ctx, "recovery", 2)
	if err != nil {
		return res, err
	}
	defer s.Drop(ctx)
	if err := s.receivePending(ctx, 1, cfg.N); err != nil {
		return res, err
	}
	if err := s.Settle(ctx); err != nil {
		return res, err
	}
	mon := e.StartMonitor(ctx, s.App)
	defer mon.Stop()

	hold, err := s.startChild(ctx, "hold", cfg)
	if err != nil {
		return res, err
	}
	for deadline := time.Now().Add(time.Minute); ; {
		var claimed int
		if err := e.Admin.QueryRow(ctx, `SELECT coalesce(sum(cardinality(ids)), 0) FROM `+s.T("inbox_batch")).Scan(&claimed); err != nil {
			return res, err
		}
		if claimed == cfg.N {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the holding process claimed %d of %d messages in a minute", claimed, cfg.N)
		}
		select {
		case err := <-hold.done:
			return res, fmt.Errorf("the holding process exited before it held every message: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := e.Admin.QueryRow(ctx, `SELECT coalesce(sum(cardinality(ids)), 0), count(*), now()
		FROM `+s.T("inbox_batch")).Scan(&res.Held, &res.Claims, &res.Killed); err != nil {
		return res, err
	}
	if err := hold.cmd.Process.Kill(); err != nil { // SIGKILL
		return res, err
	}
	if err := <-hold.done; err == nil {
		return res, errors.New("the holding process exited 0 instead of being killed")
	}

	for {
		c, err := s.startChild(ctx, "recover", cfg)
		if err != nil {
			return res, err
		}
		err = <-c.done
		res.Takeovers = append(res.Takeovers, c.takeovers...)
		if err == nil {
			break
		}
		if ee := (*exec.ExitError)(nil); !cfg.Poison || !errors.As(err, &ee) || !killed(ee) {
			return res, fmt.Errorf("recovering process: %w", err)
		}
		res.Crashes++
		if res.Crashes > 3*cfg.ExpectedCrashes() {
			return res, fmt.Errorf("the poison killed its process %d times", res.Crashes)
		}
	}

	var applied int
	var last time.Time
	if err := e.Admin.QueryRow(ctx, `SELECT count(*), max(completed_at) FROM `+s.T("inbox")+` WHERE state = 'completed'`).Scan(&applied, &last); err != nil {
		return res, err
	}
	want := cfg.N
	if cfg.Poison {
		want--
	}
	if applied != want {
		return res, fmt.Errorf("%d messages completed, want %d", applied, want)
	}
	res.Applied = last.Sub(res.Killed)
	if cfg.Poison {
		var state string
		var dead time.Time
		if err := e.Admin.QueryRow(ctx, `SELECT state, completed_at, attempts_started FROM `+s.T("inbox")+` WHERE key = $1`,
			eventKey(cfg.poison())).Scan(&state, &dead, &res.PoisonAttempts); err != nil {
			return res, err
		}
		if state != "dead" {
			return res, fmt.Errorf("the poison is %s, want dead", state)
		}
		res.PoisonDead = dead.Sub(res.Killed)
	}
	return res, s.checkLedger(ctx, applied)
}

// killed reports whether the process ended by SIGKILL.
func killed(ee *exec.ExitError) bool {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// recoveryChild is a child process of Env.Recovery.
type recoveryChild struct {
	cmd       *exec.Cmd
	done      chan error // the result of cmd.Wait, once its stderr is read to the end
	takeovers []Takeover // read after done
}

// startChild starts this program as a child of Env.Recovery in mode. Its stderr is read line by
// line: takeover lines are kept, the others logged.
func (s *inboxSchema) startChild(ctx context.Context, mode string, cfg RecoveryConfig) (*recoveryChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), RecoveryChildEnv+"="+mode, "TXBENCH_URL="+s.env.URL, "TXBENCH_SCHEMA="+s.Name,
		"TXBENCH_APP="+s.App, "TXBENCH_BATCH="+strconv.FormatBool(cfg.Batch), "TXBENCH_POISON="+strconv.Itoa(cfg.poison()))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &recoveryChild{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l struct {
				Time     time.Time `json:"time"`
				Msg      string    `json:"msg"`
				Messages int       `json:"messages"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && strings.HasPrefix(l.Msg, "txinbox: taking over messages") {
				c.takeovers = append(c.takeovers, Takeover{At: l.Time, Messages: l.Messages})
				s.env.Log.Info("takeover", "mode", mode, "messages", l.Messages)
				continue
			}
			s.env.Log.Warn("recovery child", "mode", mode, "line", sc.Text())
		}
		c.done <- cmd.Wait()
	}()
	return c, nil
}

// RecoveryChild runs a child process of Env.Recovery and returns its exit code. The environment names
// the database, schema, application_name, handler and poison. Its pool has Lease RecoveryLease and
// Timeout RecoveryLease/2, every other setting the default, and logs at Warn, as JSON, to stderr.
// Mode "hold": every handler call writes its ledger rows, then blocks (the parent kills the
// process). Mode "recover": the poison's handler call kills its own process (SIGKILL) after writing
// its ledger rows; the process exits 0 once the queue is empty.
func RecoveryChild(mode string) int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "txbench recovery child:", err)
		return 3
	}
	schema := os.Getenv("TXBENCH_SCHEMA")
	poison, _ := strconv.Atoi(os.Getenv("TXBENCH_POISON"))
	pcfg, err := pgxpool.ParseConfig(os.Getenv("TXBENCH_URL"))
	if err != nil {
		return fail(err)
	}
	pcfg.MaxConns = WorkerConcurrency + 2
	pcfg.ConnConfig.RuntimeParams["application_name"] = os.Getenv("TXBENCH_APP")
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fail(err)
	}
	cfg := RecoveryConfig{Batch: os.Getenv("TXBENCH_BATCH") == "true"}.Reference()
	hs := ledgerHandlers(pgx.Identifier{schema, "ledger"}.Sanitize(), cfg, nil, func(ns []int) {
		switch {
		case mode == "hold":
			select {} // killed here, the ledger rows written but not committed
		case poison > 0 && slices.Contains(ns, poison):
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	})
	p, err := worker.New(txinbox.Store{DB: db, Schema: schema,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, worker.Config{
		Consumer: benchConsumer, Handlers: hs, Lease: RecoveryLease, Timeout: RecoveryLease / 2,
	})
	if err != nil {
		return fail(err)
	}
	if err := p.Start(ctx); err != nil {
		return fail(err)
	}
	queue := pgx.Identifier{schema, "inbox_queue"}.Sanitize()
	for {
		time.Sleep(20 * time.Millisecond)
		if mode == "hold" {
			continue
		}
		var left bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+queue+`)`).Scan(&left); err == nil && !left {
			if err := p.Stop(ctx); err != nil {
				return fail(err)
			}
			return 0
		}
	}
}
