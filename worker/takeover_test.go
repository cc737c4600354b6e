package worker_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
	"github.com/txinbox/txinbox/worker"
)

// Takeover: the messages of a claim that never finished (its process was killed) are taken over in
// groups, halved after each crash of a group, down to one message alone. The child processes are this
// test binary, re-executed (TestMain), and killed with SIGKILL.

const (
	takeoverLease       = 2 * time.Second
	takeoverMaxAttempts = 3
	defaultConcurrency  = 4 // worker.Config.Concurrency's default
)

// takeoverChild runs a pool of a batch handler at the defaults (Concurrency 4, HandlerConfig.BatchSize
// 500) until the queue is empty (runChild). Mode "takeover-hold": every call writes its effects,
// then blocks (the parent kills the process holding its claims). Mode "takeover-poison": a call that
// holds the key TXINBOX_CHILD_KEY kills its own process (SIGKILL) after writing its effects.
func takeoverChild(mode string) int {
	ctx := context.Background()
	schema := os.Getenv("TXINBOX_CHILD_SCHEMA")
	pcfg, err := pgxpool.ParseConfig(os.Getenv("TXINBOX_CHILD_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	pcfg.MaxConns = defaultConcurrency + 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	poison := os.Getenv("TXINBOX_CHILD_KEY")
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		if err := applyCredits(ctx, tx, schema, msgs); err != nil {
			return err
		}
		switch {
		case mode == "takeover-hold":
			select {} // the parent kills us here, effects written but not committed
		case hasKey(msgs, poison):
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: takeoverMaxAttempts})
	return runChild(pool, schema, worker.Config{Consumer: "ledger", Handlers: hs,
		PollInterval: 20 * time.Millisecond, Lease: takeoverLease, Timeout: time.Second})
}

// takeovers sums what a pool's Tracer rec was told of takeovers: the groups taken over
// (txinbox.OpTakeover) and their messages, and the batches charged (txinbox.OpCharge).
func takeovers(rec *tracerec.Recorder) (rounds, messages, batches int) {
	for _, op := range rec.Ops(txinbox.OpTakeover) {
		messages += len(op.Start.Messages)
	}
	return len(rec.Ops(txinbox.OpTakeover)), messages, len(rec.Ops(txinbox.OpCharge))
}

// waitAborted waits until the server has ended the transactions of every batch row (those of a
// killed process end when the server notices its connections closed).
func (e *env) waitAborted(t *testing.T) {
	t.Helper()
	// The ids are read first, and their statuses asked in a statement without tables, as the rescuer
	// does (ListBatches, then XactStatuses): on Citus only such a statement runs on the coordinator,
	// whose transaction ids the rows hold (in one statement with the table, pg_xact_status ran on the
	// worker holding the shard, which refused the coordinator's ids as in its future).
	waitFor(t, "the killed process's transactions to end", func() bool {
		rows, err := e.Pool.Query(context.Background(), e.SQL(`SELECT xid::text FROM {schema}.inbox_batch`))
		if err != nil {
			t.Fatal(err)
		}
		xids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return e.Count(t, `SELECT count(*) FROM unnest($1::text[]) AS x(xid)
			WHERE pg_xact_status(x.xid::xid8) = 'in progress'`, xids) == 0
	})
}

// A process holding 2,000 claims (four calls of 500 of a batch handler, the defaults) is killed. A new
// pool takes them over in groups as soon as their lease ends, without waiting between groups (its
// PollInterval is an hour): every message is applied once, in far fewer takeovers than messages.
func TestKilledProcessClaimsAreTakenOverInGroups(t *testing.T) {
	t.Parallel()
	const n = 2000
	e := newEnv(t)
	e.receive(t, keys("k", n)...)
	cmd := startChild(t, e, "takeover-hold", "", "")
	waitFor(t, "the child to hold every message", func() bool { return e.inFlight(t) == n })
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	e.waitAborted(t)

	rec := &tracerec.Recorder{}
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		return applyCredits(ctx, tx, e.Schema, msgs)
	})
	run(t, batchPool(t, e.with(rec), nil, hs, func(c *worker.Config) {
		// The default Timeout and Lease: a call stalled on a loaded machine must not charge an attempt.
		c.PollInterval = time.Hour
		worker.NoListen(c)
	}))
	waitFor(t, "every message completed", func() bool { return e.count(t, "completed") == n })
	if got := e.Count(t, `SELECT count(DISTINCT key) FROM {schema}.effects`); got != n {
		t.Fatalf("effects of %d messages, want %d", got, n)
	}
	rounds, messages, batches := takeovers(rec)
	t.Logf("%d messages taken over in %d takeovers, from %d batches charged", messages, rounds, batches)
	if messages != n || batches != defaultConcurrency {
		t.Errorf("takeovers took %d messages of %d batches charged, want %d of %d", messages, batches, n, defaultConcurrency)
	}
	if rounds > n/100 {
		t.Errorf("%d takeovers for %d messages, want at most %d", rounds, n, n/100)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE attempts_started <> 2 OR attempts_failed <> 0`); got != 0 {
		t.Errorf("%d messages were charged other than the killed attempt and the takeover's", got)
	}
}

// One message of 500, all claimed by one call of a batch handler, kills its process whenever it runs.
// The process is restarted after each crash. The takeovers halve the group holding it until it runs
// alone, where its crashes count: it is dead after at most about log2(500)+MaxAttempts crashes, and the
// 499 others are each applied once and never dead, whatever crashes they shared with it.
func TestProcessKillingPoisonIsIsolatedByHalving(t *testing.T) {
	t.Parallel()
	const n = 500
	e := newEnv(t)
	e.receive(t, keys("p", n)...)
	const poison = "p-137"
	bound := int(math.Ceil(math.Log2(n))) + takeoverMaxAttempts
	crashes := 0
	for {
		cmd := startChild(t, e, "takeover-poison", poison, "")
		if err := cmd.Wait(); err == nil {
			break // the queue is empty
		}
		crashes++
		if crashes > 2*bound {
			t.Fatalf("still crashing after %d restarts", crashes)
		}
	}
	t.Logf("the poison killed its process %d times (bound %d)", crashes, bound)
	if crashes > bound {
		t.Errorf("%d crashes, want at most log2(%d)+MaxAttempts = %d", crashes, n, bound)
	}
	if s, started, _, lastErr := e.state(t, poison); s != "dead" || started != takeoverMaxAttempts || !strings.Contains(lastErr, "never finished") {
		t.Errorf("%s: state=%s started=%d err=%q, want dead after %d attempts that never finished", poison, s, started, lastErr, takeoverMaxAttempts)
	}
	if got := e.count(t, "completed"); got != n-1 {
		t.Errorf("completed = %d, want %d", got, n-1)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead' AND key <> $1`, poison); got != 0 {
		t.Errorf("%d innocent messages are dead", got)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != n-1 {
		t.Errorf("effects = %d, want %d", got, n-1)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = $1`, poison); got != 0 {
		t.Errorf("the poison's effects were applied %d times", got)
	}
}

// Messages taken over alone (their group halved down to one) run one at a time across processes: two
// pools of different owners take over six such messages of a killed worker, and never run two at once.
func TestMessagesTakenOverAloneRunOneAtATimeAcrossOwners(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("s", 6)...)
	// A killed worker's messages, each of them charged and isolated already (to run alone).
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`UPDATE {schema}.inbox_queue
		SET token = token + 1, attempts_started = 1, group_size = 1, isolate = 1`)); err != nil {
		t.Fatal(err)
	}
	var running, most atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		now := running.Add(1)
		defer running.Add(-1)
		for {
			if old := most.Load(); now <= old || most.CompareAndSwap(old, now) {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
		return applyCredit(ctx, tx, e.Schema, m)
	})
	for _, owner := range []string{"process-A", "process-B"} {
		run(t, e.pool(t, hs, func(c *worker.Config) { c.Owner = owner; worker.NoListen(c) }))
	}
	waitFor(t, "every message completed", func() bool { return e.count(t, "completed") == 6 })
	if got := most.Load(); got != 1 {
		t.Errorf("%d messages taken over alone ran at once, want 1", got)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != 6 {
		t.Errorf("effects = %d, want 6", got)
	}
}
