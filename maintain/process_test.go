package maintain_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/worker"
)

// The process tests run worker pools in child processes (this test binary, re-executed) and kill
// them with SIGKILL: a real process death, with its connections closed by the kernel.

const childEnv = "TXINBOX_MAINTAIN_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// processLease is the maintainers' Lease in the child processes.
const processLease = 2 * time.Second

// childConsumers are the consumers each child process runs a pool of.
var childConsumers = []string{"a", "b", "c"}

// childRelays is the number of outbox relays each child process runs.
const childRelays = 2

// child runs one Runner (package runner) with one pool of each of childConsumers and childRelays
// outbox relays, and so one maintainer candidate (Lease processLease, generations of one second),
// until it is killed, logging JSON at Debug to stdout. TXINBOX_CHILD_URL and TXINBOX_CHILD_SCHEMA name
// the database.
func child() int {
	ctx := context.Background()
	schema := os.Getenv("TXINBOX_CHILD_SCHEMA")
	pcfg, err := pgxpool.ParseConfig(os.Getenv("TXINBOX_CHILD_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	pcfg.MaxConns = int32(len(childConsumers)*(1+2) + childRelays + 2) // each pool's runner, rescuer and heartbeat; the relays; the maintainer
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug})).With("pid", os.Getpid())
	cfg := runner.Config{Maintenance: maintain.Config{Lease: processLease, Generation: time.Second,
		RollupInterval: 500 * time.Millisecond}}
	maintain.SetHealthCheckInterval(&cfg.Maintenance, 500*time.Millisecond)
	for _, consumer := range childConsumers {
		hs := worker.NewHandlers()
		worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
			return applyCredit(ctx, tx, schema, m)
		})
		cfg.Pools = append(cfg.Pools, worker.Config{Consumer: consumer, Handlers: hs, Concurrency: 1, PollInterval: 50 * time.Millisecond})
	}
	for range childRelays {
		cfg.Relays = append(cfg.Relays, outbox.RelayConfig{Concurrency: 1, PollInterval: 50 * time.Millisecond,
			Publisher: outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil })})
	}
	r, err := runner.New(txinbox.Store{DB: db, Schema: schema, Logger: log}, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := r.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	log.Info(childStarted, "owner", r.Maintainer().Owner())
	select {} // until killed
}

// childStarted is the message a child logs once its Runner runs, with its maintainer's owner.
const childStarted = "test child: runner started"

// proc is a child process and the log records it wrote.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	recs   []map[string]any
	killed time.Time // when the test killed it
}

// record parses a line of a child's output: a JSON log record, or nil for a line that is not one (the
// last line of a process killed while writing it).
func record(line string) map[string]any {
	var r map[string]any
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return nil
	}
	return r
}

func startProc(t *testing.T, e *env) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "TXINBOX_CHILD_URL="+e.URL, "TXINBOX_CHILD_SCHEMA="+e.Schema)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if r := record(sc.Text()); r != nil {
				p.mu.Lock()
				p.recs = append(p.recs, r)
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill kills p with SIGKILL (once) and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	if !p.killed.IsZero() {
		p.mu.Unlock()
		return
	}
	p.killed = time.Now()
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// find returns p's records whose message is msg.
func (p *proc) find(msg string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, r := range p.recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

const (
	leadsMsg   = "txinbox: this maintainer now leads the schema's maintenance"
	stoppedMsg = "txinbox: this maintainer stopped leading the schema's maintenance"
	ranMsg     = "txinbox: maintenance job ran"
)

// leading reports whether one of p's maintainers leads now, by its logs.
func (p *proc) leading() bool {
	return len(p.find(leadsMsg)) > len(p.find(stoppedMsg))
}

func recTime(t *testing.T, r map[string]any) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["time"]))
	if err != nil {
		t.Fatalf("log time %v: %v", r["time"], err)
	}
	return at
}

// Three processes, each running one Runner of pools of three consumers and two relays (three
// maintainer candidates in all, one per process): exactly one maintainer leads at a time; when the leader's process is killed (SIGKILL), another takes over once
// its lease has ended, and the rotations go on; no job runs twice for the same period, across all the
// processes (each run is logged with its job and period).
func TestOneMaintainerAcrossProcessesAndSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range childConsumers {
		msgs := make([]inbox.Message, 30)
		for i := range msgs {
			msgs[i] = inbox.Message{Consumer: c, Key: fmt.Sprintf("%s-%d", c, i), Kind: "credit", Payload: []byte(`{"amount": 1}`)}
		}
		if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
	}
	gen := func() int64 { return e.Count(t, `SELECT gen FROM {schema}.inbox_ring`) }
	procs := []*proc{startProc(t, e), startProc(t, e), startProc(t, e)}
	var leader *proc
	waitFor(t, "a leader", func() bool {
		for _, p := range procs {
			if p.leading() {
				leader = p
				return true
			}
		}
		return false
	})
	g := gen()
	waitFor(t, "two rotations by the first leader", func() bool { return gen() >= g+2 })
	if n := e.completed(t); n != 90 {
		t.Logf("%d of 90 messages completed so far", n)
	}

	leader.kill()
	var next *proc
	waitFor(t, "another leader", func() bool {
		for _, p := range procs {
			if p != leader && p.leading() {
				next = p
				return true
			}
		}
		return false
	})
	leads := next.find(leadsMsg)
	takeover := recTime(t, leads[len(leads)-1]).Sub(leader.killed)
	t.Logf("leadership taken over %v after the SIGKILL (lease %v)", takeover.Round(time.Millisecond), processLease)
	if bound := processLease + processLease/3 + time.Second; takeover > bound {
		t.Errorf("taken over %v after the kill, more than the lease and a third (%v) and a second", takeover, processLease+processLease/3)
	}
	g = gen()
	waitFor(t, "two rotations by the new leader", func() bool { return gen() >= g+2 })
	waitFor(t, "every message completed", func() bool { return e.completed(t) == 90 })
	for _, p := range procs {
		p.kill()
	}

	// One maintainer candidate per process, whatever it runs (three pools, two relays): every record
	// of leadership a process wrote names the one owner its Runner started with.
	for _, p := range procs {
		started := p.find(childStarted)
		if len(started) != 1 {
			t.Fatalf("process %d logged %d starts, want 1", p.cmd.Process.Pid, len(started))
		}
		owner := fmt.Sprint(started[0]["owner"])
		for _, msg := range []string{leadsMsg, stoppedMsg} {
			for _, r := range p.find(msg) {
				if got := fmt.Sprint(r["owner"]); got != owner {
					t.Errorf("process %d: a maintainer of owner %q led, besides its runner's %q: more than one candidate in one process", p.cmd.Process.Pid, got, owner)
				}
			}
		}
	}

	// Leadership intervals: from each "now leads" to its "stopped leading", or to the kill.
	type interval struct {
		owner      string
		start, end time.Time
	}
	var ivs []interval
	for _, p := range procs {
		open := map[string]time.Time{}
		p.mu.Lock()
		recs := p.recs
		p.mu.Unlock()
		for _, r := range recs {
			owner := fmt.Sprint(r["owner"])
			switch r["msg"] {
			case leadsMsg:
				open[owner] = recTime(t, r)
			case stoppedMsg:
				ivs = append(ivs, interval{owner, open[owner], recTime(t, r)})
				delete(open, owner)
			}
		}
		for owner, start := range open {
			ivs = append(ivs, interval{owner, start, p.killed})
		}
	}
	if len(ivs) < 2 {
		t.Fatalf("%d leadership intervals, want at least 2 (before and after the kill): %v", len(ivs), ivs)
	}
	for i, a := range ivs {
		for _, b := range ivs[i+1:] {
			if a.start.Before(b.end) && b.start.Before(a.end) {
				t.Errorf("two leaders at once: %s from %v to %v and %s from %v to %v", a.owner, a.start.Format(time.StampMicro),
					a.end.Format(time.StampMicro), b.owner, b.start.Format(time.StampMicro), b.end.Format(time.StampMicro))
			}
		}
	}
	// Every run of a job, in every process: no (job, period) twice.
	ran := map[string]string{}
	runs := 0
	for _, p := range procs {
		for _, r := range p.find(ranMsg) {
			k := fmt.Sprint(r["job"], " ", r["period"])
			if o, dup := ran[k]; dup {
				t.Errorf("job %s ran twice for period %v: by %s and by %s", r["job"], r["period"], o, r["owner"])
			}
			ran[k] = fmt.Sprint(r["owner"])
			runs++
		}
	}
	t.Logf("%d runs of jobs, %d leadership intervals", runs, len(ivs))
}
