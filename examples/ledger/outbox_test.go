package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/examples/ledger/internal/outboxdemo"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
)

// TestTwoServicesExactlyOnce is the acceptance run of the outbox across two services: the ledger's
// credits publish AccountCredited events through its outbox, a `ledger relay` process publishes
// them to a private NATS JetStream server, and the notifier process consumes them into its inbox and
// writes a notification per credit. The first relay process is SIGKILLed mid-batch (half of its
// batch published, nothing recorded), the first notifier process inside a handler's transaction,
// every broker connection is cut and the broker restarted, while credits keep being made (one in
// ten rolled back with its event). Every committed event must be published, every credit notified
// exactly once, and no rolled back credit seen. It needs nats-server and PostgreSQL, and fails
// without them.
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
		NATSServer: natsServer, RelayCommand: testChildCommand,
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
	if !strings.Contains(out.String(), "duplicates 0, missing 0: OK") {
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
