package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/examples/ledger/internal/outboxdemo"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// TestTwoServicesExactlyOnce is the acceptance run of the outbox across two services: the ledger's
// credits, made through its API (a `ledger serve` process), publish AccountCredited events through
// its outbox, a `ledger relay` process publishes them to a private NATS JetStream server, and the
// notifier process consumes them into its inbox and writes a notification per credit. The first
// relay process is SIGKILLed mid-batch (half of its batch published, nothing recorded), the first
// notifier process inside a handler's transaction, every broker connection is cut and the broker
// restarted, while credits keep being made (one in ten rolled back with its event). Every committed
// event must be published, every credit notified exactly once, and no rolled back credit seen; the
// notifier (4 workers, batches) must have handled each account's credits in the order they were
// made (the ordering key it read from the envelope's partitionkey); and the notifier's handler span
// of every credit made through the API must be in the trace of that credit's request, through the
// publish and relay spans, as the spans the processes wrote show. It needs nats-server and
// PostgreSQL, and fails without them.
func TestTwoServicesExactlyOnce(t *testing.T) {
	t.Parallel()
	natsServer, err := outboxdemo.FindNATSServer()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ledgerSchema, url := testdb.NewSchema(t)
	notifierSchema, _ := testdb.NewSchema(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, cfg, ledgerSchema); err != nil {
		t.Fatal(err)
	}
	notifier, err := buildNotifier(ctx, "../notifier", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	rep, err := outboxdemo.Run(ctx, outboxdemo.Options{
		URL: url, LedgerSchema: ledgerSchema, NotifierSchema: notifierSchema,
		Credits: 300, RelayBatch: 10, NotifierHangAfter: 15,
		NATSServer: natsServer, LedgerCommand: testChildCommand,
		NotifierCommand: func(args []string) *exec.Cmd { return exec.Command(notifier, args...) },
		ChildStderr:     &logs, LogLevel: "warn", Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !rep.OK() {
		t.Fatalf("the check failed:\n%s\nservices' logs:\n%s", out.String(), logs.String())
	}
	// The faults happened as described.
	if !rep.RelayKilled || rep.HangPublished == 0 || rep.HangPublished >= rep.HangBatch || !rep.NotifierKilled ||
		rep.CutConns < 2 || rep.BrokerRestarts != 1 || rep.Made < 300 || rep.RolledBack == 0 {
		t.Fatalf("the run did not exercise every fault:\n%s", out.String())
	}
	// Per-account order: every account's credits handled in order, several credits an account.
	if !rep.OrderHeld() || rep.OrderCredits != rep.Credits || rep.OrderCredits < 2*rep.OrderAccounts ||
		!strings.Contains(out.String(), fmt.Sprintf("per-account order: held (%d accounts, %d credits)", rep.OrderAccounts, rep.Credits)) {
		t.Fatalf("per-account order not shown:\n%s", out.String())
	}
	// One trace: the handler of a credit made through the API ran in its request's trace, and the
	// summary shows one such chain of spans across the three processes.
	if !rep.TraceHeld() || rep.TracedHandled == 0 || rep.OtherTrace != 0 ||
		!regexp.MustCompile(`trace [0-9a-f]{8}… \(ordering key outbox-acct-\d+\): POST /v1/credits \(ledger serve, pid \d+\) → txinbox\.publish → `+
			`txinbox\.relay \(ledger relay, pid \d+\) → txinbox\.receive \(notifier, pid \d+, linked\) → txinbox\.handle( \(notifier, pid \d+\))?\n`).MatchString(out.String()) {
		t.Fatalf("one trace not shown:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "duplicates 0, missing 0, per-account order held, one trace held: OK") {
		t.Fatalf("summary:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}

// lockedBuffer is a bytes.Buffer safe for the writes of several processes' pipes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
