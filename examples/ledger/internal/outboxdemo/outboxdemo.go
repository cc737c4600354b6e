// Package outboxdemo runs the two-service part of the ledger demo: credits made through the ledger's
// API (a `ledger serve` process) publish AccountCredited events through its outbox, a relay process
// (`ledger relay`) publishes them to a private NATS JetStream server, and the notifier service
// (examples/notifier) consumes them into its own inbox and writes one notification per credit.
// Meanwhile the relay process is SIGKILLed mid-batch, the notifier process is SIGKILLed inside a
// handler's transaction, every connection to the broker is cut, and the broker is restarted. At the
// end:
//
//   - every credit must have exactly one notification;
//   - the notifier (4 workers, batches of 16) must have handled each account's credits in the order
//     the ledger made them: the events carry the account as the envelope's partitionkey, which the
//     notifier takes as their ordering key with no configuration;
//   - the notifier's handler span of every credit made through the API must be in the trace of that
//     credit's request: each process appends its spans to a file (--trace-file), and the check reads
//     them and prints one credit's chain, from the ledger's POST /v1/credits to the notifier's
//     txinbox.handle.
package outboxdemo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/idempotency"
)

// Options configures a run.
type Options struct {
	// URL is the PostgreSQL server of both services.
	URL string
	// LedgerSchema holds the ledger (migrated already; its credits so far are part of the check).
	// NotifierSchema holds the notifier's inbox and notifications; the notifier migrates it.
	LedgerSchema, NotifierSchema string
	// Credits is the least number of credits made during the run, while the faults happen, through the
	// ledger's API (POST /v1/credits).
	Credits int
	// Accounts receive those credits (0: 3 × RelayBatch, so that the relay's first batches are full:
	// a batch holds one event per account at most).
	Accounts int
	// RelayBatch is the relay's batch size (0: 100). The first relay process hangs in its third batch.
	RelayBatch int
	// NotifierHangAfter is the number of notifications the first notifier process writes before it
	// hangs in a handler (0: RelayBatch, which the first relay publishes for sure).
	NotifierHangAfter int
	// NATSServer is the nats-server binary (empty: FindNATSServer).
	NATSServer string
	// LedgerCommand builds the command of `ledger <args>` (args start with "serve" or "relay").
	LedgerCommand func(args []string) *exec.Cmd
	// NotifierCommand builds the command of the notifier with args.
	NotifierCommand func(args []string) *exec.Cmd
	// ChildStderr receives the services' logs (nil: discarded); LogLevel is theirs (empty: error).
	ChildStderr io.Writer
	LogLevel    string
	// Progress receives a line per step (nil: none).
	Progress io.Writer
	// Timeout is the longest the final wait may go without progress (0: 1 minute).
	Timeout time.Duration
}

// Report is what a run did and found.
type Report struct {
	Made       int64 // credits made during the run through the API (committed; counted in the ledger)
	RolledBack int   // credits rolled back during the run, with their events

	RelayKilled    bool // a relay process was SIGKILLed while it held a batch
	HangPublished  int  // events of that batch it had published (not recorded as sent)
	HangBatch      int  // events in that batch
	NotifierKilled bool // a notifier process was SIGKILLed inside a handler's transaction
	CutConns       int  // client connections cut at the proxy
	BrokerRestarts int

	Credits       int64 // ledger entries (every credit of the schema)
	Events        int64 // AccountCredited events in the outbox
	EventEntries  int64 // distinct entries named by those events
	Sent, Dead    int64 // events by state
	Stored        int64 // messages in the stream
	Notifications int64 // notification rows
	Notified      int64 // distinct credits notified
	Duplicates    int64 // notifications beyond the first of a credit
	Missing       int64 // credits without a notification
	Unknown       int64 // notifications of no credit
	RolledBackOut int64 // events or notifications of a rolled back credit (must be 0)
	InboxPending  int64 // notifier inbox messages not completed

	// Per-account order, as the notifier recorded it (its notifications' account_seq and prev_seq).
	OrderAccounts  int64  // accounts notified
	OrderCredits   int64  // notifications whose handling order is known (account_seq > 0)
	OrderViolation string // the first notification handled out of its account's order ("" if none)
	OutOfOrder     int64  // notifications handled out of their account's order
	OutOfOrderAccs int64  // accounts with such a notification

	// One trace, from the spans the processes wrote.
	TracedRequests int    // POST /v1/credits spans with their txinbox.publish span
	TracedHandled  int    // of their events, those whose notifier handler spans are all in the request's trace
	OtherTrace     int    // of their events, those with a handler span in another trace (must be 0)
	TraceChain     string // one credit's chain of spans, from its request to the notifier's handler
	TraceProblem   string // why the trace check failed ("" if it held)

	Steps   []string
	Elapsed time.Duration
	Failure string // why the run could not finish, if so
}

// OK says whether every credit has exactly one notification and everything else adds up, each
// account's credits were handled in order, and a credit's handler ran in its request's trace.
func (r *Report) OK() bool {
	return r.Failure == "" && r.Credits > 0 && r.Events == r.Credits && r.EventEntries == r.Credits &&
		r.Sent == r.Events && r.Dead == 0 && r.Notifications == r.Credits && r.Notified == r.Credits &&
		r.Duplicates == 0 && r.Missing == 0 && r.Unknown == 0 && r.RolledBackOut == 0 && r.InboxPending == 0 &&
		r.OrderHeld() && r.TraceHeld()
}

// OrderHeld says whether the notifier handled every account's credits in order: each notification
// was written when the account's previous credit, and no later one, was notified.
func (r *Report) OrderHeld() bool {
	return r.OrderViolation == "" && r.OrderCredits > 0 && r.OrderCredits == r.Notifications
}

// TraceHeld says whether the notifier's handler of a credit made through the API ran in the trace of
// its request, and none in another trace.
func (r *Report) TraceHeld() bool {
	return r.TraceProblem == "" && r.TracedHandled > 0 && r.OtherTrace == 0 && r.TraceChain != ""
}

// Print writes the summary.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "Two services (ledger outbox -> relay -> NATS JetStream -> notifier inbox), %s:\n", r.Elapsed.Round(100*time.Millisecond))
	for _, s := range r.Steps {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	fmt.Fprintf(w, "  ledger:   credits %d (%d made during the faults, %d more rolled back), AccountCredited events %d: sent %d, dead %d\n",
		r.Credits, r.Made, r.RolledBack, r.Events, r.Sent, r.Dead)
	fmt.Fprintf(w, "  broker:   %d messages in the stream (copies within the duplicate window are dropped by Nats-Msg-Id)\n", r.Stored)
	fmt.Fprintf(w, "  notifier: notifications %d for %d credits, duplicates %d, missing %d, unknown %d; events of rolled back credits seen %d; inbox not completed %d\n",
		r.Notifications, r.Notified, r.Duplicates, r.Missing, r.Unknown, r.RolledBackOut, r.InboxPending)
	switch {
	case r.OrderViolation != "":
		fmt.Fprintf(w, "  per-account order: VIOLATED (%d notifications out of order, in %d accounts); the first: %s\n",
			r.OutOfOrder, r.OutOfOrderAccs, r.OrderViolation)
	case r.OrderHeld():
		fmt.Fprintf(w, "  per-account order: held (%d accounts, %d credits)\n", r.OrderAccounts, r.OrderCredits)
	default:
		fmt.Fprintf(w, "  per-account order: not shown (%d of %d notifications with the credit's place in its account)\n",
			r.OrderCredits, r.Notifications)
	}
	if r.TraceChain != "" {
		fmt.Fprintf(w, "  %s\n", r.TraceChain)
	}
	verdict := "held"
	if !r.TraceHeld() {
		verdict = "FAILED"
		if r.TraceProblem != "" {
			verdict += ": " + r.TraceProblem
		}
	}
	fmt.Fprintf(w, "  one trace: %s (%d credits made through the API, %d traced from their request; the notifier's handler spans of %d in their request's trace, %d in another)\n",
		verdict, r.Made, r.TracedRequests, r.TracedHandled, r.OtherTrace)
	if r.Failure != "" {
		fmt.Fprintf(w, "  FAILED: %s\n", r.Failure)
	}
	verdict = "OK"
	if !r.OK() {
		verdict = "FAILED"
	}
	order, trace := "held", "held"
	if !r.OrderHeld() {
		order = "FAILED"
	}
	if !r.TraceHeld() {
		trace = "FAILED"
	}
	fmt.Fprintf(w, "Check: credits %d, notifications %d, duplicates %d, missing %d, per-account order %s, one trace %s: %s\n",
		r.Credits, r.Notifications, r.Duplicates, r.Missing, order, trace, verdict)
}

// The account ids of the credits the run makes start with accountPrefix, of those it rolls back with
// rolledBackPrefix.
const (
	accountPrefix    = "outbox-acct-"
	rolledBackPrefix = "rolled-back-"
)

type run struct {
	o      Options
	rep    *Report
	db     *pgxpool.Pool
	nats   *natsServer
	prx    *proxy
	dir    string
	apiURL string // the ledger's API (`ledger serve`)
	client *http.Client
	spans  int // trace files handed out
}

func (r *run) say(format string, args ...any) {
	s := time.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	r.rep.Steps = append(r.rep.Steps, s)
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, "demo: %s\n", s)
	}
}

// Run runs the services, the faults and the check. An error means it could not start (no
// nats-server, say); what went wrong later is in Report.Failure.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.RelayBatch == 0 {
		o.RelayBatch = 100
	}
	if o.Accounts == 0 {
		o.Accounts = 3 * o.RelayBatch
	}
	if o.NotifierHangAfter == 0 {
		o.NotifierHangAfter = o.RelayBatch
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	if o.LogLevel == "" {
		o.LogLevel = "error"
	}
	if o.ChildStderr == nil {
		o.ChildStderr = io.Discard
	}
	if o.LedgerCommand == nil || o.NotifierCommand == nil {
		return nil, errors.New("outboxdemo: LedgerCommand and NotifierCommand are required")
	}
	if o.NATSServer == "" {
		bin, err := FindNATSServer()
		if err != nil {
			return nil, err
		}
		o.NATSServer = bin
	}
	start := time.Now()
	r := &run{o: o, rep: &Report{}, client: &http.Client{Timeout: 30 * time.Second}}
	var err error
	if r.dir, err = os.MkdirTemp("", "ledger-demo-nats-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.dir)
	if r.db, err = pgxpool.New(ctx, o.URL); err != nil {
		return nil, err
	}
	defer r.db.Close()
	if r.nats, err = startNATS(o.NATSServer, r.dir); err != nil {
		return nil, err
	}
	defer r.nats.stop()
	if r.prx, err = newProxy(r.nats.addr()); err != nil {
		return nil, err
	}
	defer r.prx.close()
	r.say("private nats-server -js on %s (store in %s), the services connect through a TCP proxy at %s", r.nats.addr(), r.dir, r.prx.url())

	if err := r.scenario(ctx); err != nil {
		r.rep.Failure = err.Error()
	}
	if err := r.check(ctx); err != nil && r.rep.Failure == "" {
		r.rep.Failure = err.Error()
	}
	r.checkTrace()
	r.rep.Elapsed = time.Since(start)
	return r.rep, nil
}

// traceFile returns a new file name for a process's spans (name-N.spans), in the run's directory.
func (r *run) traceFile(name string) string {
	r.spans++
	return filepath.Join(r.dir, fmt.Sprintf("%s-%d%s", name, r.spans, spansExt))
}

// The notifier's worker pool: batches handled at once, and most messages per batch.
const (
	notifierWorkers   = 4
	notifierBatchSize = 16
)

func (r *run) serveArgs(addr string) []string {
	return []string{"serve", "--database-url", r.o.URL, "--schema", r.o.LedgerSchema, "--addr", addr, "--workers", "0",
		"--trace-file", r.traceFile("ledger-serve"), "--log-level", r.o.LogLevel}
}

func (r *run) relayArgs(hang bool) []string {
	a := []string{"relay", "--database-url", r.o.URL, "--schema", r.o.LedgerSchema, "--nats-url", r.prx.url(),
		"--batch-size", strconv.Itoa(r.o.RelayBatch), "--lease", "3s", "--timeout", "2s", "--log-level", r.o.LogLevel,
		"--trace-file", r.traceFile("ledger-relay")}
	if hang {
		a = append(a, "--hang-after-batches", "2")
	}
	return a
}

func (r *run) notifierArgs(hang bool) []string {
	a := []string{"--database-url", r.o.URL, "--schema", r.o.NotifierSchema, "--nats-url", r.prx.url(),
		"--ack-wait", "3s", "--lease", "3s", "--log-level", r.o.LogLevel,
		"--workers", strconv.Itoa(notifierWorkers), "--batch-size", strconv.Itoa(notifierBatchSize),
		"--trace-file", r.traceFile("notifier")}
	if hang {
		a = append(a, "--hang-after", strconv.Itoa(r.o.NotifierHangAfter))
	}
	return a
}

// waitHang waits for c's HANG line.
func waitHang(ctx context.Context, c *child, d time.Duration) (string, error) {
	select {
	case line := <-c.hang:
		return line, nil
	case <-c.done:
		return "", fmt.Errorf("%s (pid %d) exited before it hung: %v", c.name, c.pid(), c.err)
	case <-time.After(d):
		return "", fmt.Errorf("%s (pid %d) did not reach its fault within %v", c.name, c.pid(), d)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (r *run) scenario(ctx context.Context) error {
	// The ledger's API, whose requests and publishes are traced.
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	api, err := startChild("ledger serve", r.o.LedgerCommand(r.serveArgs(addr)), r.o.ChildStderr)
	if err != nil {
		return err
	}
	defer stopIfRunning(api)
	r.apiURL = "http://" + addr
	if err := r.waitAPI(ctx, api, time.Minute); err != nil {
		return err
	}
	r.say("started the ledger's API, process %d (`ledger serve --workers 0` on %s): the credits below are POST /v1/credits requests, each traced from its request span", api.pid(), addr)

	// Credits during everything that follows, each in its own transaction with its event; one in ten
	// is rolled back, with its event. The relay starts once three batches wait, so that its third
	// batch, in which it hangs, is a full one.
	pctx, stopProducing := context.WithCancel(ctx)
	var made, rolledBack atomic.Int64
	produced := make(chan error, 1)
	go func() { produced <- r.produce(pctx, &made, &rolledBack) }()
	defer stopProducing()
	if err := r.waitPending(ctx, produced, 3*r.o.RelayBatch); err != nil {
		return err
	}

	// The relay first: it creates the stream, which the notifier's consumer needs.
	relay1, err := startChild("relay", r.o.LedgerCommand(r.relayArgs(true)), r.o.ChildStderr)
	if err != nil {
		return err
	}
	defer stopIfRunning(relay1)
	if err := r.waitStream(ctx, time.Minute); err != nil {
		return err
	}
	notifier1, err := startChild("notifier", r.o.NotifierCommand(r.notifierArgs(true)), r.o.ChildStderr)
	if err != nil {
		return err
	}
	defer stopIfRunning(notifier1)
	r.say("started relay process %d (it hangs in its third batch) and notifier process %d (it hangs after %d notifications)",
		relay1.pid(), notifier1.pid(), r.o.NotifierHangAfter)

	line, err := waitHang(ctx, relay1, time.Minute)
	if err != nil {
		return err
	}
	f := strings.Fields(line) // HANG <published> <batch>
	if len(f) == 3 {
		r.rep.HangPublished, _ = strconv.Atoi(f[1])
		r.rep.HangBatch, _ = strconv.Atoi(f[2])
	}
	relay1.kill()
	r.rep.RelayKilled = true
	r.say("SIGKILLed relay process %d mid-batch: %d of the %d events of its batch published to JetStream, none recorded as sent",
		relay1.pid(), r.rep.HangPublished, r.rep.HangBatch)
	relay2, err := startChild("relay", r.o.LedgerCommand(r.relayArgs(false)), r.o.ChildStderr)
	if err != nil {
		return err
	}
	defer stopIfRunning(relay2)
	r.say("started relay process %d: it takes the dead relay's batch over when its lease (3s) ends", relay2.pid())

	line, err = waitHang(ctx, notifier1, time.Minute)
	if err != nil {
		return err
	}
	notifier1.kill()
	r.rep.NotifierKilled = true
	r.say("SIGKILLed notifier process %d inside a handler's transaction (%s): its uncommitted notifications and unacknowledged messages are redelivered",
		notifier1.pid(), strings.TrimPrefix(line, "HANG "))
	notifier2, err := startChild("notifier", r.o.NotifierCommand(r.notifierArgs(false)), r.o.ChildStderr)
	if err != nil {
		return err
	}
	defer stopIfRunning(notifier2)
	r.say("started notifier process %d", notifier2.pid())

	// Both services connected (the notifier after its migration), then the cut.
	for deadline := time.Now().Add(time.Minute); r.prx.clients() < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay and the notifier did not both connect to the broker within a minute (%d connections)", r.prx.clients())
		}
	}
	time.Sleep(time.Second) // traffic through the new processes
	r.rep.CutConns = r.prx.cut(time.Second)
	r.say("cut the %d broker connections at the proxy (new ones refused for 1s)", r.rep.CutConns)
	time.Sleep(time.Second)
	if err := r.nats.restart(); err != nil {
		return err
	}
	r.rep.BrokerRestarts++
	r.say("restarted nats-server (same port and store)")

	for made.Load() < int64(r.o.Credits) {
		select {
		case err := <-produced:
			return fmt.Errorf("making credits: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopProducing()
	if err := <-produced; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("making credits: %w", err)
	}
	r.rep.RolledBack = int(rolledBack.Load())
	r.say("made %d credits through the API (and rolled back %d) during the above", made.Load(), r.rep.RolledBack)

	if err := r.drain(ctx, []*child{api, relay2, notifier2}); err != nil {
		return err
	}
	for _, c := range []*child{api, relay2, notifier2} {
		if err := c.stop(); err != nil {
			return fmt.Errorf("%s (pid %d): %w", c.name, c.pid(), err)
		}
	}
	r.say("stopped the API %d, relay %d and notifier %d with SIGTERM", api.pid(), relay2.pid(), notifier2.pid())
	return nil
}

// waitAPI waits until the ledger's API answers GET /healthz with 200.
func (r *run) waitAPI(ctx context.Context, api *child, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.apiURL+"/healthz", nil)
		if err != nil {
			return err
		}
		if resp, err := r.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-api.done:
			return fmt.Errorf("%s (pid %d) exited: %v", api.name, api.pid(), api.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ledger's API (pid %d) did not answer on %s within %v", api.pid(), r.apiURL, d)
		}
	}
}

// waitPending waits until at least n AccountCredited events wait in the outbox.
func (r *run) waitPending(ctx context.Context, produced <-chan error, n int) error {
	for {
		var pending int
		err := r.db.QueryRow(ctx, r.sql(`SELECT count(*) FROM {ledger}.outbox WHERE topic = $1 AND state = 'pending'`),
			ledger.TopicAccountCredited).Scan(&pending)
		if err != nil || pending >= n {
			return err
		}
		select {
		case err := <-produced:
			return fmt.Errorf("making credits: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func stopIfRunning(c *child) {
	select {
	case <-c.done:
	default:
		c.kill()
	}
}

// waitStream waits until the relay created the stream (asking the server directly).
func (r *run) waitStream(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if _, err := r.streamMessages(ctx); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the relay did not create the stream within %v: %w", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// streamMessages returns the number of messages in the stream, asking the server directly.
func (r *run) streamMessages(ctx context.Context) (int64, error) {
	nc, err := nats.Connect("nats://"+r.nats.addr(), nats.Timeout(2*time.Second))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(cctx, "LEDGER_EVENTS")
	if err != nil {
		return 0, err
	}
	return int64(s.CachedInfo().State.Msgs), nil
}

// produce makes credits until ctx ends: POST /v1/credits to the ledger's API (the entry, the
// balance and the AccountCredited event in the request's transaction, under its span), except every
// tenth, which the demo applies itself (ledger.Apply) and rolls back after its event was written.
func (r *run) produce(ctx context.Context, made, rolledBack *atomic.Int64) error {
	l, err := ledger.New(txinbox.Store{DB: r.db, Schema: r.o.LedgerSchema})
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		amount := int64(100 + i%900)
		if i%10 == 9 {
			err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
				if _, err := l.Apply(ctx, tx, ledger.Credit{AccountID: rolledBackPrefix + strconv.Itoa(i), AmountCents: amount,
					Source: ledger.SourceCredit}); err != nil {
					return err
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				return err
			}
			rolledBack.Add(1)
		} else {
			if err := r.postCredit(ctx, "outbox-credit-"+strconv.Itoa(i), accountPrefix+strconv.Itoa(i%r.o.Accounts), amount); err != nil {
				return err
			}
			made.Add(1)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// postCredit makes a credit through the ledger's API, with its Idempotency-Key: an answer lost or
// refused for a while is asked again with the same key, which credits once.
func (r *run) postCredit(ctx context.Context, key, account string, amount int64) error {
	body := fmt.Sprintf(`{"account_id":%q,"amount_cents":%d}`, account, amount)
	var last error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.apiURL+"/v1/credits", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idempotency.HeaderKey, key)
		resp, err := r.client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			last = err
			continue
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated:
			return nil
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusConflict:
			last = fmt.Errorf("POST /v1/credits: %s: %s", resp.Status, msg)
		default:
			return fmt.Errorf("POST /v1/credits: %s: %s", resp.Status, msg)
		}
	}
	return last
}

var errRollback = errors.New("rolled back on purpose")

// drain waits until every credit has a notification and every event was sent, giving up after
// Options.Timeout without progress; then it waits through one more redelivery period (AckWait,
// lease), in which no duplicate may appear.
func (r *run) drain(ctx context.Context, procs []*child) error {
	last, lastChange := int64(-1), time.Now()
	for {
		var credits, notified, sent, pending int64
		err := r.db.QueryRow(ctx, r.sql(`SELECT (SELECT count(*) FROM {ledger}.ledger_entries),
			(SELECT count(DISTINCT entry_id) FROM {notifier}.notifications),
			(SELECT count(*) FROM {ledger}.outbox WHERE state = 'sent'),
			(SELECT count(*) FROM {notifier}.inbox WHERE state <> 'completed')`)).Scan(&credits, &notified, &sent, &pending)
		if err != nil {
			return err
		}
		if notified == credits && sent == credits && pending == 0 {
			break
		}
		if p := notified + sent; p != last {
			last, lastChange = p, time.Now()
		} else if time.Since(lastChange) > r.o.Timeout {
			return fmt.Errorf("no progress for %v: %d credits, %d events sent, %d credits notified", r.o.Timeout, credits, sent, notified)
		}
		for _, c := range procs {
			select {
			case <-c.done:
				return fmt.Errorf("%s (pid %d) exited: %v", c.name, c.pid(), c.err)
			default:
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.say("every credit notified; waiting 4s more for late redeliveries")
	time.Sleep(4 * time.Second)
	return nil
}

func (r *run) sql(s string) string {
	return strings.NewReplacer("{ledger}", pgx.Identifier{r.o.LedgerSchema}.Sanitize(),
		"{notifier}", pgx.Identifier{r.o.NotifierSchema}.Sanitize()).Replace(s)
}

// check counts, across both services' schemas.
func (r *run) check(ctx context.Context) error {
	rep := r.rep
	err := r.db.QueryRow(ctx, r.sql(`SELECT
		(SELECT count(*) FROM {ledger}.ledger_entries),
		(SELECT count(*) FROM {ledger}.outbox WHERE topic = $1),
		(SELECT count(DISTINCT (payload::jsonb->>'entry_id')) FROM {ledger}.outbox WHERE topic = $1),
		(SELECT count(*) FROM {ledger}.outbox WHERE topic = $1 AND state = 'sent'),
		(SELECT count(*) FROM {ledger}.outbox WHERE topic = $1 AND state = 'dead'),
		(SELECT count(*) FROM {notifier}.notifications),
		(SELECT count(DISTINCT entry_id) FROM {notifier}.notifications),
		(SELECT count(*) FROM {ledger}.ledger_entries e WHERE NOT EXISTS (SELECT FROM {notifier}.notifications n WHERE n.entry_id = e.id)),
		(SELECT count(*) FROM {notifier}.notifications n WHERE NOT EXISTS (SELECT FROM {ledger}.ledger_entries e WHERE e.id = n.entry_id)),
		(SELECT count(*) FROM {ledger}.outbox WHERE key LIKE $2) + (SELECT count(*) FROM {notifier}.notifications WHERE account_id LIKE $2)
		    + (SELECT count(*) FROM {ledger}.ledger_entries WHERE account_id LIKE $2),
		(SELECT count(*) FROM {notifier}.inbox WHERE state <> 'completed'),
		(SELECT count(*) FROM {ledger}.ledger_entries WHERE account_id LIKE $3)`),
		ledger.TopicAccountCredited, rolledBackPrefix+"%", accountPrefix+"%").Scan(&rep.Credits, &rep.Events, &rep.EventEntries, &rep.Sent, &rep.Dead, &rep.Notifications, &rep.Notified,
		&rep.Missing, &rep.Unknown, &rep.RolledBackOut, &rep.InboxPending, &rep.Made)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	rep.Duplicates = rep.Notifications - rep.Notified
	if err := r.checkOrder(ctx); err != nil {
		return fmt.Errorf("check: order: %w", err)
	}
	rep.Stored, err = r.streamMessages(ctx)
	if err != nil {
		return fmt.Errorf("check: stream: %w", err)
	}
	return nil
}

// checkOrder reads the order in which the notifier handled each account's credits: a notification
// records the credit's place in its account (account_seq, from the event) and the account's highest
// place notified when it was written (prev_seq). In order, every notification has prev_seq =
// account_seq - 1. The first one that has not is described with the inbox messages of the credit and
// of the one that should have come before it (their ids are the order in which the notifier stored
// them).
func (r *run) checkOrder(ctx context.Context) error {
	rep := r.rep
	err := r.db.QueryRow(ctx, r.sql(`SELECT count(DISTINCT account_id), count(*) FILTER (WHERE account_seq > 0),
		count(*) FILTER (WHERE prev_seq <> account_seq - 1), count(DISTINCT account_id) FILTER (WHERE prev_seq <> account_seq - 1)
		FROM {notifier}.notifications`)).Scan(&rep.OrderAccounts, &rep.OrderCredits, &rep.OutOfOrder, &rep.OutOfOrderAccs)
	if err != nil {
		return err
	}
	var (
		account              string
		seq, prev            int64
		notified             time.Time
		msgID, beforeID      *int64
		stored, beforeStored *time.Time
	)
	err = r.db.QueryRow(ctx, r.sql(`SELECT n.account_id, n.account_seq, n.prev_seq, n.created_at, i.id, i.received_at, b.id, b.received_at
		FROM {notifier}.notifications n
		LEFT JOIN {notifier}.inbox i ON i.consumer = $1 AND i.key = n.event_id
		LEFT JOIN LATERAL (SELECT id, received_at FROM {notifier}.inbox
		                   WHERE consumer = $1 AND payload->>'account_id' = n.account_id
		                     AND payload->>'account_seq' = (n.account_seq - 1)::text
		                   ORDER BY id LIMIT 1) b ON true
		WHERE n.prev_seq <> n.account_seq - 1
		ORDER BY n.id LIMIT 1`), notifierConsumer).Scan(&account, &seq, &prev, &notified, &msgID, &stored, &beforeID, &beforeStored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	what := fmt.Sprintf("credit seq %d was handled after credit seq %d", seq, prev)
	if prev < seq {
		what = fmt.Sprintf("credit seq %d was handled before credit seq %d (the account's last notified credit was seq %d)", seq, seq-1, prev)
	}
	inboxMsg := func(id *int64, at *time.Time) string {
		if id == nil || at == nil {
			return "not in the inbox"
		}
		return fmt.Sprintf("message %d, stored at %s", *id, at.Local().Format("15:04:05.000"))
	}
	rep.OrderViolation = fmt.Sprintf("account %s: %s, at %s; in the notifier's inbox credit seq %d is %s, credit seq %d %s",
		account, what, notified.Local().Format("15:04:05.000"), seq, inboxMsg(msgID, stored), seq-1, inboxMsg(beforeID, beforeStored))
	return nil
}

// notifierConsumer is the notifier's inbox consumer (examples/notifier).
const notifierConsumer = "notifier"
