package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// The shutdown tests run the README's pattern in a real process (this test binary, re-executed):
// Start on a ctx that outlives the signal, wait for SIGTERM, Stop with a deadline. The parent sends a
// real SIGTERM while a handler is running.

// stopReport is what a sigterm child prints of its Stop.
type stopReport struct {
	Err       string
	Abandoned int
	Messages  int
}

// sigtermChild runs a pool until SIGTERM, then stops it with the deadline TXINBOX_CHILD_STOP and
// prints a stopReport. Its handler writes its effect, creates TXINBOX_CHILD_MARKER, then works for
// 1.5 s ignoring its ctx ("sigterm-slow") or never returns ("sigterm-stuck"). It exits 0 when Stop
// returned nil, 4 when it returned a *worker.StopError, without closing the pgxpool (which would wait
// for the stuck handler).
func sigtermChild(mode string) int {
	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	schema, marker := os.Getenv("TXINBOX_CHILD_SCHEMA"), os.Getenv("TXINBOX_CHILD_MARKER")
	stopAfter, err := time.ParseDuration(os.Getenv("TXINBOX_CHILD_STOP"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv("TXINBOX_CHILD_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, schema, m); err != nil {
			return err
		}
		_ = os.WriteFile(marker, []byte(m.Key), 0o600)
		if mode == "sigterm-stuck" {
			select {} // ignores ctx forever: only Stop's deadline ends the batch
		}
		time.Sleep(1500 * time.Millisecond) // ignores ctx; finishes well within the deadline
		return nil
	})
	p, err := worker.New(txinbox.Store{DB: pool, Schema: schema}, worker.Config{Consumer: "ledger", Handlers: hs,
		Concurrency: 1, BatchSize: 10, PollInterval: 20 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := p.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	<-sigCtx.Done()
	ctx, cancel := context.WithTimeout(context.Background(), stopAfter)
	defer cancel()
	err = p.Stop(ctx)
	rep := stopReport{}
	var se *worker.StopError
	if errors.As(err, &se) {
		rep.Abandoned, rep.Messages = se.Abandoned, se.Messages
	}
	if err != nil {
		rep.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	if err != nil {
		return 4
	}
	pool.Close()
	return 0
}

// runSigtermChild starts a sigterm child, sends it SIGTERM once its handler runs, and returns its exit
// code and report. The child must exit by itself: a child still running 2 minutes after the signal
// (its Stop ignored the deadline) is killed and the test fails.
func runSigtermChild(t *testing.T, e *env, mode string, stopAfter time.Duration) (int, stopReport) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "handling")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "TXINBOX_CHILD_URL="+e.URL, "TXINBOX_CHILD_SCHEMA="+e.Schema,
		"TXINBOX_CHILD_MARKER="+marker, "TXINBOX_CHILD_STOP="+stopAfter.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child's handler to run", func() bool { _, err := os.Stat(marker); return err == nil })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The child's exit status is not what is checked: the report it prints is.
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the child did not exit after SIGTERM: Stop(%v) did not return at its deadline", stopAfter)
	}
	var rep stopReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("child output %q: %v", out.String(), err)
	}
	return cmd.ProcessState.ExitCode(), rep
}

// SIGTERM while a handler runs: with the README's pattern the handler finishes and its message
// commits; the signal does not cancel in-flight work.
func TestSIGTERMLetsInFlightHandlerFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "t-1")
	code, rep := runSigtermChild(t, e, "sigterm-slow", time.Minute)
	if code != 0 || rep.Err != "" {
		t.Fatalf("child exit %d, Stop = %q; want 0 and nil", code, rep.Err)
	}
	if s, started, failed, _ := e.state(t, "t-1"); s != "completed" || started != 1 || failed != 0 {
		t.Fatalf("t-1: %s, started %d, failed %d; want completed at its first attempt", s, started, failed)
	}
	if n := e.effects(t); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// SIGTERM while a handler ignores its ctx forever: Stop returns at its deadline with a *StopError, the
// process exits, the batch's writes are rolled back and its messages are pending again, not charged an
// attempt; another worker then applies each exactly once.
func TestSIGTERMStopReturnsAtDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "u-1", "u-2", "u-3")
	code, rep := runSigtermChild(t, e, "sigterm-stuck", time.Second)
	if code != 4 || rep.Abandoned != 1 || rep.Messages != 3 {
		t.Fatalf("child exit %d, report %+v; want exit 4 and a StopError of 1 batch, 3 messages", code, rep)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'pending' AND attempts_started = 0 AND attempts_failed = 0`); n != 3 {
		t.Fatalf("%d of 3 messages pending and uncharged after the abandoned batch", n)
	}
	if n := e.inFlight(t); n != 0 {
		t.Fatalf("%d messages still listed in batch rows", n)
	}
	if n := e.effects(t); n != 0 {
		t.Fatalf("effects = %d after the abandoned batch, want 0", n)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "all completed", func() bool { return e.count(t, "completed") == 3 })
	if n := e.effects(t); n != 3 {
		t.Fatalf("effects = %d, want 3", n)
	}
}
