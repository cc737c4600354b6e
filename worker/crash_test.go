package worker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// The crash tests run a worker pool in a child process (this test binary, re-executed) and kill it
// with SIGKILL: a real process death, with its connections closed by the kernel.

const childEnv = "TXINBOX_WORKER_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if strings.HasPrefix(mode, "sigterm-") {
			os.Exit(sigtermChild(mode))
		}
		if strings.HasPrefix(mode, "takeover-") {
			os.Exit(takeoverChild(mode))
		}
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child runs a pool until it is killed. TXINBOX_CHILD_URL/SCHEMA name the database; mode "hang"
// blocks the handler of key TXINBOX_CHILD_KEY after writing its effect (the parent kills the
// process mid-batch); mode "crash" kills the process itself from that key's handler; mode
// "batch-hang" runs a batch handler that blocks in the call holding that key, after writing the
// effects of every message of the call (batchHangHandlers); mode "slow" spends 10ms in every
// handler (the parent kills the process mid-drain).
func child(mode string) int {
	ctx := context.Background()
	schema := os.Getenv("TXINBOX_CHILD_SCHEMA")
	pool, err := pgxpool.New(ctx, os.Getenv("TXINBOX_CHILD_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	target := os.Getenv("TXINBOX_CHILD_KEY")
	marker := os.Getenv("TXINBOX_CHILD_MARKER")
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, schema, m); err != nil {
			return err
		}
		if m.Key == target {
			switch mode {
			case "hang":
				_ = os.WriteFile(marker, []byte("x"), 0o600)
				select {} // the parent kills us here, effects written but not committed
			case "crash":
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
		if mode == "slow" {
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 3})
	if mode == "batch-hang" {
		hs = batchHangHandlers(schema, target, marker)
	}
	return runChild(pool, schema, worker.Config{Consumer: "ledger", Handlers: hs,
		Concurrency: 2, BatchSize: 20, PollInterval: 20 * time.Millisecond, Lease: 2 * time.Second, Timeout: time.Second})
}

// runChild runs a pool of cfg on pool and schema until the queue is empty, then stops it and returns
// 0 (the child's exit code); 3 if the pool cannot start.
func runChild(pool *pgxpool.Pool, schema string, cfg worker.Config) int {
	ctx := context.Background()
	p, err := worker.New(txinbox.Store{DB: pool, Schema: schema}, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := p.Start(ctx); err != nil {
		return 3
	}
	for {
		time.Sleep(50 * time.Millisecond)
		var n int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "inbox_queue"}.Sanitize()).Scan(&n); err == nil && n == 0 {
			_ = p.Stop(ctx)
			return 0
		}
	}
}

func startChild(t *testing.T, e *env, mode, key, marker string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "TXINBOX_CHILD_URL="+e.URL, "TXINBOX_CHILD_SCHEMA="+e.Schema,
		"TXINBOX_CHILD_KEY="+key, "TXINBOX_CHILD_MARKER="+marker)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestSIGKILLMidBatchThenRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 40)...)
	marker := filepath.Join(t.TempDir(), "hung")
	cmd := startChild(t, e, "hang", "m-25", marker)
	waitFor(t, "the child to reach m-25", func() bool { _, err := os.Stat(marker); return err == nil })
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// A new worker (this process) recovers everything once the dead worker's lease ends.
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, nil)) // the default Timeout: a statement stalled on a loaded machine does not time out
	waitFor(t, "all completed", func() bool { return e.count(t, "completed") == 40 })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 40 {
		t.Fatalf("effects = %d, want 40", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'm-25'`); n != 1 {
		t.Fatalf("m-25 effects = %d", n)
	}
}

func TestCrashLoopingMessageEndsDeadAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("c", 30)...)
	// Restart the crashing worker until it drains the queue and exits by itself.
	restarts := 0
	for {
		cmd := startChild(t, e, "crash", "c-7", "")
		err := cmd.Wait()
		if err == nil {
			break
		}
		restarts++
		if restarts > 20 {
			t.Fatalf("worker still crashing after %d restarts", restarts)
		}
	}
	s, started, _, lastErr := e.state(t, "c-7")
	if s != "dead" || started != 3 || !strings.Contains(lastErr, "never finished") {
		t.Fatalf("c-7: state=%s started=%d err=%q", s, started, lastErr)
	}
	if n := e.count(t, "completed"); n != 29 {
		t.Fatalf("completed = %d, want 29", n)
	}
	// Every batch-mate completed; none was charged more than the one crash it shared with c-7, and none
	// was applied twice.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed' AND attempts_started > 2`); n != 0 {
		t.Fatalf("%d innocent messages were charged more than one crashed attempt", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 29 {
		t.Fatalf("effects = %d, want 29", n)
	}
	t.Logf("crash-looping message dead after %d worker restarts", restarts)
}

func TestConnectionCutBetweenEffectAndCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("k", 10)...)
	var cut atomic.Bool
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		if m.Key == "k-5" && cut.CompareAndSwap(false, true) {
			// Cut this transaction's connection from the server side after the effect is written.
			var pid int
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			if _, err := e.Pool.Exec(ctx, "SELECT pg_terminate_backend($1::int)", pid); err != nil {
				return err
			}
		}
		return nil
	})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "all completed", func() bool { return e.count(t, "completed") == 10 })
	if !cut.Load() {
		t.Fatal("the connection was never cut")
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 10 {
		t.Fatalf("effects = %d, want 10", n)
	}
}
