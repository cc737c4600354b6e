package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/worker"
)

// The consumer and kind every txinbox benchmark uses.
const (
	benchConsumer = "ledger"
	benchKind     = "credit"
)

// InboxConfig is a txinbox worker pool configuration.
type InboxConfig struct {
	Concurrency  int
	BatchSize    int
	PollInterval time.Duration // 0: the pool default (1s)
	// NoListen: no LISTEN connection (the pool's Store has a negative NotifyInterval); the pool
	// finds messages by polling only (every 10ms for 1s after activity, PollInterval when idle).
	NoListen bool
	// HandlerBatchSize, if positive, registers the handler as a batch handler (worker.HandleBatch)
	// with this HandlerConfig.BatchSize: one multi-row INSERT per call instead of one INSERT per
	// message.
	HandlerBatchSize int
}

func (c InboxConfig) String() string {
	s := fmt.Sprintf("Concurrency=%d, BatchSize=%d", c.Concurrency, c.BatchSize)
	if c.HandlerBatchSize > 0 {
		s += fmt.Sprintf(", batch handler BatchSize=%d", c.HandlerBatchSize)
	}
	if c.PollInterval != 0 {
		s += fmt.Sprintf(", PollInterval=%s", c.PollInterval)
	}
	if c.NoListen {
		s += ", no LISTEN"
	}
	return s + fmt.Sprintf(", pool=%d conns", c.Concurrency+2)
}

// inboxSchema is a migrated txinbox schema.
type inboxSchema struct {
	*Schema
	client *inbox.Client
}

func (e *Env) newInboxSchema(ctx context.Context, system string, conns int32) (*inboxSchema, error) {
	s, err := e.NewSchema(ctx, system, conns)
	if err != nil {
		return nil, err
	}
	if err := migrate.Up(ctx, txinbox.Store{DB: s.Pool, Schema: s.Name}); err != nil {
		s.Drop(ctx)
		return nil, fmt.Errorf("txinbox migrate: %w", err)
	}
	if e.Distribute {
		if err := migrate.Distribute(ctx, txinbox.Store{DB: s.Pool, Schema: s.Name}); err != nil {
			s.Drop(ctx)
			return nil, fmt.Errorf("txinbox distribute: %w", err)
		}
	}
	c, err := inbox.New(txinbox.Store{DB: s.Pool, Schema: s.Name}, inbox.Config{})
	if err != nil {
		s.Drop(ctx)
		return nil, err
	}
	return &inboxSchema{Schema: s, client: c}, nil
}

// receivePending receives messages first..first+n-1 (keys evt-<n>) with ReceiveMany, 1,000 a call.
func (s *inboxSchema) receivePending(ctx context.Context, first, n int) error {
	const batch = 1000
	msgs := make([]inbox.Message, 0, batch)
	for i := first; i < first+n; i++ {
		msgs = append(msgs, inbox.Message{Consumer: benchConsumer, Key: eventKey(i), Kind: benchKind, Payload: payload(i, int64(i%100+1))})
		if len(msgs) == batch || i == first+n-1 {
			rs, err := s.client.ReceiveMany(ctx, msgs)
			if err != nil {
				return err
			}
			for _, r := range rs {
				if r.Outcome != inbox.Inserted {
					return fmt.Errorf("receive %d: %s", r.ID, r.Outcome)
				}
			}
			msgs = msgs[:0]
		}
	}
	return nil
}

// retain adds completed messages (kept for deduplication, as after Retention-long traffic) directly
// with INSERT ... SELECT generate_series, a million per statement. Keys old-<n> for n in
// from..to-1.
func (s *inboxSchema) retain(ctx context.Context, from, to int) error {
	const chunk = 1_000_000
	for lo := from; lo < to; lo += chunk {
		hi := min(lo+chunk, to)
		start := time.Now()
		_, err := s.env.Admin.Exec(ctx, `INSERT INTO `+s.T("inbox")+`
			(consumer, key, kind, payload, headers, fingerprint, state, attempts_started, received_at,
			 started_at, completed_at, expires_at)
			SELECT $1, 'old-' || lpad(g::text, 9, '0'), $2, p, '{}',
			       sha256(convert_to($2 || E'\n' || p::text, 'UTF8')), 'completed', 1, now(), now(), now(),
			       now() + interval '7 days'
			FROM generate_series($3::int, $4::int - 1) g, LATERAL (SELECT jsonb_build_object('n', g, 'amount', g % 100 + 1) AS p) x`,
			benchConsumer, benchKind, lo, hi)
		if err != nil {
			return err
		}
		s.env.Log.Info("retained rows inserted", "upto", hi, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// queueEmpty reports whether no message is left to handle.
func (s *inboxSchema) queueEmpty(ctx context.Context) (bool, error) {
	var left bool
	err := s.env.Admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.T("inbox_queue")+`)`).Scan(&left)
	return !left, err
}

type ledgerPayload struct {
	N      int   `json:"n"`
	Amount int64 `json:"amount"`
}

// ledgerHandlers registers the benchmarks' handler of benchKind, which inserts one ledger row per
// message into ledger (a quoted table name) in the message's transaction: with worker.Handle, or with
// worker.HandleBatch and HandlerConfig.BatchSize cfg.HandlerBatchSize (one multi-row INSERT per call)
// when that is positive. onHandled, if not nil, is called with each message's number before its
// insert; applied, if not nil, with the numbers of the call's messages after their insert.
func ledgerHandlers(ledger string, cfg InboxConfig, onHandled func(n int), applied func(ns []int)) *worker.Handlers {
	insert := "INSERT INTO " + ledger + " (event_id, amount) VALUES ($1, $2)"
	hs := worker.NewHandlers()
	if cfg.HandlerBatchSize > 0 {
		// The same ledger effect, one statement per call.
		insertMany := "INSERT INTO " + ledger + " (event_id, amount) SELECT * FROM unnest($1::text[], $2::bigint[])"
		worker.HandleBatch(hs, benchKind, func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[ledgerPayload]) error {
			keys, amounts := make([]string, len(msgs)), make([]int64, len(msgs))
			for i, m := range msgs {
				if onHandled != nil {
					onHandled(m.Payload.N)
				}
				keys[i], amounts[i] = m.Key, m.Payload.Amount
			}
			if _, err := tx.Exec(ctx, insertMany, keys, amounts); err != nil || applied == nil {
				return err
			}
			ns := make([]int, len(msgs))
			for i, m := range msgs {
				ns[i] = m.Payload.N
			}
			applied(ns)
			return nil
		}, worker.HandlerConfig{BatchSize: cfg.HandlerBatchSize})
	} else {
		worker.Handle(hs, benchKind, func(ctx context.Context, tx pgx.Tx, m *worker.Message[ledgerPayload]) error {
			if onHandled != nil {
				onHandled(m.Payload.N)
			}
			if _, err := tx.Exec(ctx, insert, m.Key, m.Payload.Amount); err != nil || applied == nil {
				return err
			}
			applied([]int{m.Payload.N})
			return nil
		})
	}
	return hs
}

// startPool starts a worker pool of ledgerHandlers whose handler calls onHandled (if not nil) with
// each message's number, before its insert.
func (s *inboxSchema) startPool(ctx context.Context, cfg InboxConfig, onHandled func(n int)) (*worker.Pool, error) {
	hs := ledgerHandlers(s.T("ledger"), cfg, onHandled, nil)
	st := txinbox.Store{DB: s.Pool, Schema: s.Name, Logger: s.env.Log.With("pool", s.Name)}
	if cfg.NoListen {
		st.NotifyInterval = -1 // the pool's Store only: the senders still notify
	}
	p, err := worker.New(st, worker.Config{
		Consumer: benchConsumer, Handlers: hs,
		Concurrency: cfg.Concurrency, BatchSize: cfg.BatchSize, PollInterval: cfg.PollInterval})
	if err != nil {
		return nil, err
	}
	return p, p.Start(ctx)
}

func stopPool(ctx context.Context, p *worker.Pool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return p.Stop(ctx)
}

// InboxDrain runs one txinbox drain of n messages received beforehand, with retained completed
// messages already in the inbox table, and returns messages/s and the footprint. The clock stops
// when the queue is empty (every batch committed).
func (e *Env) InboxDrain(ctx context.Context, n, retained int, cfg InboxConfig) (float64, Footprint, error) {
	s, err := e.newInboxSchema(ctx, "txinbox", int32(cfg.Concurrency+2))
	if err != nil {
		return 0, Footprint{}, err
	}
	defer s.Drop(ctx)
	if retained > 0 {
		if err := s.retain(ctx, 0, retained); err != nil {
			return 0, Footprint{}, err
		}
	}
	return s.drain(ctx, 1, n, cfg)
}

// drain receives messages first..first+n-1, settles, and times their drain by a fresh pool.
func (s *inboxSchema) drain(ctx context.Context, first, n int, cfg InboxConfig) (float64, Footprint, error) {
	e := s.env
	if err := s.receivePending(ctx, first, n); err != nil {
		return 0, Footprint{}, err
	}
	if err := s.Settle(ctx); err != nil {
		return 0, Footprint{}, err
	}
	before, err := s.LedgerCount(ctx)
	if err != nil {
		return 0, Footprint{}, err
	}
	var handled atomic.Int64
	mon := e.StartMonitor(ctx, s.App)
	start := time.Now()
	p, err := s.startPool(ctx, cfg, func(int) { handled.Add(1) })
	if err != nil {
		return 0, mon.Stop(), err
	}
	deadline := time.Now().Add(drainTimeout(n))
	for {
		if handled.Load() >= int64(n) {
			empty, err := s.queueEmpty(ctx)
			if err != nil {
				_ = stopPool(ctx, p)
				return 0, mon.Stop(), err
			}
			if empty {
				break
			}
			time.Sleep(time.Millisecond)
		} else {
			time.Sleep(2 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			_ = stopPool(ctx, p)
			return 0, mon.Stop(), errors.New("txinbox: drain timed out")
		}
	}
	elapsed := time.Since(start)
	stopErr := stopPool(ctx, p)
	fp := mon.Stop()
	if stopErr != nil {
		return 0, fp, stopErr
	}
	if err := s.checkLedger(ctx, int(before)+n); err != nil {
		return 0, fp, err
	}
	return float64(n) / elapsed.Seconds(), fp, nil
}

// GrowthPoint is the drain throughput with some completed messages retained.
type GrowthPoint struct {
	Retained int
	Rate     float64
	FP       Footprint
	InboxMB  float64 // size of the inbox table with its indexes when the drain started
}

// InboxGrowth drains n messages with each number of retained completed rows in levels (increasing),
// in one schema: the retained rows are added between drains (the messages drained before count as
// retained too).
func (e *Env) InboxGrowth(ctx context.Context, n int, levels []int, cfg InboxConfig) ([]GrowthPoint, error) {
	s, err := e.newInboxSchema(ctx, "growth", int32(cfg.Concurrency+2))
	if err != nil {
		return nil, err
	}
	defer s.Drop(ctx)
	var out []GrowthPoint
	have, first := 0, 1
	for _, level := range levels {
		// Messages drained at earlier levels are retained rows too: add the rest.
		if want := level - (first - 1); want > have {
			if err := s.retain(ctx, have, want); err != nil {
				return out, err
			}
			have = want
		}
		var size int64
		if err := e.Admin.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint FROM pg_partition_tree($1::regclass)`, s.T("inbox")).Scan(&size); err != nil {
			return out, err
		}
		e.Log.Info("growth drain", "retained", have+first-1)
		retainedNow := have + first - 1
		rate, fp, err := s.drain(ctx, first, n, cfg)
		if err != nil {
			return out, err
		}
		out = append(out, GrowthPoint{Retained: retainedNow, Rate: rate, FP: fp, InboxMB: float64(size) / (1 << 20)})
		first += n
	}
	return out, nil
}

func (e *Env) quietLogger() *slog.Logger {
	return slog.New(&levelHandler{min: slog.LevelWarn, Handler: e.Log.Handler()})
}

type levelHandler struct {
	min slog.Level
	slog.Handler
}

func (h *levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

// describe says, for a report, how many of the messages ns there are and what the inbox holds for
// the first few: each one's inbox row and queue row, and the batches in flight.
func (s *inboxSchema) describe(ctx context.Context, ns []int) string {
	keys := make([]string, 0, 5)
	for _, n := range ns[:min(len(ns), 5)] {
		keys = append(keys, eventKey(n))
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var rows []byte
	err := s.env.Admin.QueryRow(ctx, `SELECT jsonb_build_object(
		'inbox', (SELECT jsonb_agg(to_jsonb(m) - 'payload' - 'headers' - 'fingerprint'
			|| jsonb_build_object('queue', (SELECT to_jsonb(q) FROM `+s.T("inbox_queue")+` q WHERE q.id = m.id)))
			FROM `+s.T("inbox")+` m WHERE m.key = ANY($1)),
		'batches', (SELECT jsonb_agg(to_jsonb(b)) FROM `+s.T("inbox_batch")+` b),
		'queued', (SELECT count(*) FROM `+s.T("inbox_queue")+`),
		'now', now())::text`, keys).Scan(&rows)
	if err != nil {
		return fmt.Sprintf("%d messages not handled, the first %v (their rows: %v)", len(ns), keys, err)
	}
	return fmt.Sprintf("%d messages not handled, the first %v: %s", len(ns), keys, rows)
}
