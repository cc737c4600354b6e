package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	txrunner "github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/worker"
)

// WorkerEnv is the environment variable that carries a worker process's configuration (JSON). A
// process started by Run finds it set and runs WorkerMain.
const WorkerEnv = "TXCHAOS_WORKER"

// The consumer and the message kinds of a chaos run.
const (
	Consumer   = "ledger"
	KindCredit = "credit" // applied once: a ledger row and a balance update in the handler's transaction
	KindPoison = "poison" // always fails: dead after its attempts
)

// doubleApply starts the error of a credit whose ledger row already exists: the message would have been
// applied twice. The handler makes it permanent, so such a message ends dead and the run fails.
const doubleApply = "DOUBLE APPLY"

// workerSpec is what a worker process is told through WorkerEnv.
type workerSpec struct {
	URL               string        `json:"url"`
	Schema            string        `json:"schema"`
	AppName           string        `json:"app_name"`
	Shard             int           `json:"shard"` // the balance row this process adds to
	Concurrency       int           `json:"concurrency"`
	BatchSize         int           `json:"batch_size"`
	Lease             time.Duration `json:"lease"`
	Timeout           time.Duration `json:"timeout"`
	PollInterval      time.Duration `json:"poll_interval"`
	PoisonMaxAttempts int           `json:"poison_max_attempts"`
}

// creditPayload is the payload of a credit message.
type creditPayload struct {
	Seq    int   `json:"seq"`
	Amount int64 `json:"amount"`
}

// WorkerMain runs one worker process of a chaos run: a worker pool on the schema and consumer named in
// WorkerEnv, until SIGTERM or SIGINT (a graceful stop), a SIGKILL (the point of the exercise), or the
// death of its parent. It returns the process exit code.
func WorkerMain() int {
	var spec workerSpec
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "txchaos worker: bad %s: %v\n", WorkerEnv, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	pcfg, err := poolConfig(spec.URL, spec.AppName, int32(spec.Concurrency+2))
	if err != nil {
		log.Error("txchaos worker: database url", "err", err)
		return 2
	}
	db, err := pgxpool.NewWithConfig(context.Background(), pcfg) // connects lazily: the server may be down
	if err != nil {
		log.Error("txchaos worker: pool", "err", err)
		return 2
	}
	defer db.Close()

	p, err := txrunner.New(txinbox.Store{DB: db, Schema: spec.Schema, Logger: log}, txrunner.Config{Owner: spec.AppName,
		Pools: []worker.Config{{
			Consumer: Consumer, Handlers: handlers(spec),
			Concurrency: spec.Concurrency, BatchSize: spec.BatchSize, Lease: spec.Lease, Timeout: spec.Timeout,
			PollInterval: spec.PollInterval,
			Backoff:      txinbox.Exponential{Base: 50 * time.Millisecond, Max: time.Second}}}})
	if err != nil {
		log.Error("txchaos worker: pool config", "err", err)
		return 2
	}
	if err := p.Start(context.Background()); err != nil {
		log.Error("txchaos worker: start", "err", err)
		return 2
	}
	// Exit with the parent: a worker left behind would keep claiming from a schema being dropped.
	parent := os.Getppid()
	orphaned := make(chan struct{})
	go func() {
		for os.Getppid() == parent {
			time.Sleep(200 * time.Millisecond)
		}
		close(orphaned)
	}()
	select {
	case <-ctx.Done():
	case <-orphaned:
		log.Error("txchaos worker: parent died; exiting")
		return 3
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Stop(sctx)
	return 0
}

// handlers registers the two kinds of a chaos run.
func handlers(spec workerSpec) *worker.Handlers {
	hs := worker.NewHandlers()
	ledger := pgx.Identifier{spec.Schema, "chaos_ledger"}.Sanitize()
	balance := pgx.Identifier{spec.Schema, "chaos_balance"}.Sanitize()
	insert := "INSERT INTO " + ledger + " (key, message_id, amount) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING"
	// Each worker process adds to a balance row of its own (a sharded counter: the balance is their
	// sum), so that processes do not queue behind one another's batch transactions.
	credit := "UPDATE " + balance + " SET total = total + $1, applied = applied + 1 WHERE shard = $2"
	worker.Handle(hs, KindCredit, func(ctx context.Context, tx pgx.Tx, m *worker.Message[creditPayload]) error {
		tag, err := tx.Exec(ctx, insert, m.Key, m.ID, m.Payload.Amount)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return txinbox.Permanent(fmt.Errorf("%s: the ledger already holds %s (message %d, attempt %d)", doubleApply, m.Key, m.ID, m.Attempt))
		}
		tag, err = tx.Exec(ctx, credit, m.Payload.Amount, spec.Shard)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("balance row missing")
		}
		return err
	})
	worker.Handle(hs, KindPoison, func(ctx context.Context, tx pgx.Tx, m *worker.Message[json.RawMessage]) error {
		return fmt.Errorf("poison message %s always fails (attempt %d)", m.Key, m.Attempt)
	}, worker.HandlerConfig{MaxAttempts: spec.PoisonMaxAttempts})
	return hs
}

// poolConfig parses url and names the connections appName (application_name), which is how the
// connection cutter finds them.
func poolConfig(url, appName string, maxConns int32) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	cfg.MaxConns = maxConns
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	return cfg, nil
}
