package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// RawConfig is the raw SQL drain: Clients connections each loop over one transaction that claims
// PerTx pending messages (SELECT ... FOR UPDATE SKIP LOCKED), inserts their ledger rows (one
// multi-row INSERT) and marks them done (one UPDATE). It is the floor of what any PostgreSQL queue
// with the same guarantee must do, with nothing else (no attempts, leases, fencing or retries).
type RawConfig struct {
	Clients int
	PerTx   int
}

type rawPayload struct {
	N      int   `json:"n"`
	Amount int64 `json:"amount"`
}

// RawDrain runs one raw drain of n messages and returns messages/s and the footprint.
func (e *Env) RawDrain(ctx context.Context, n int, cfg RawConfig) (float64, Footprint, error) {
	s, err := e.NewSchema(ctx, fmt.Sprintf("raw%d", cfg.PerTx), int32(cfg.Clients))
	if err != nil {
		return 0, Footprint{}, err
	}
	defer s.Drop(ctx)
	msgs, err := s.rawMessages(ctx)
	if err != nil {
		return 0, Footprint{}, err
	}
	if _, err := e.Admin.Exec(ctx, `INSERT INTO `+msgs+` (key, payload)
		SELECT 'evt-' || lpad(g::text, 8, '0'), jsonb_build_object('n', g, 'amount', g % 100 + 1)
		FROM generate_series(1, $1::int) g`, n); err != nil {
		return 0, Footprint{}, err
	}
	if err := s.Settle(ctx); err != nil {
		return 0, Footprint{}, err
	}
	claim := `SELECT id, key, payload FROM ` + msgs + ` WHERE state = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`
	insert := `INSERT INTO ` + s.T("ledger") + ` (event_id, amount) SELECT * FROM unnest($1::text[], $2::bigint[])`
	update := `UPDATE ` + msgs + ` SET state = 'done' WHERE id = ANY($1::bigint[])`

	// Open the connections before the clock starts, as a worker pool would have.
	conns := make([]*pgx.Conn, 0, cfg.Clients)
	for range cfg.Clients {
		c, err := s.Pool.Acquire(ctx)
		if err != nil {
			return 0, Footprint{}, err
		}
		defer c.Release()
		conns = append(conns, c.Conn())
	}
	return s.timeBatches(ctx, n, len(conns), func(i int) func() (int, error) {
		c := conns[i]
		var b claimedBatch
		return func() (int, error) {
			err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, claim, cfg.PerTx)
				if err != nil {
					return err
				}
				if err := b.scan(rows); err != nil || len(b.ids) == 0 {
					return err
				}
				if _, err := tx.Exec(ctx, insert, b.keys, b.amounts); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, update, b.ids)
				return err
			})
			return len(b.ids), err
		}
	})
}

// rawMessages creates the raw SQL benchmarks' message table, raw_msgs, and returns its quoted name:
// the naive one-table design, a partial index on pending rows, the status updated in place.
func (s *Schema) rawMessages(ctx context.Context) (string, error) {
	msgs := s.T("raw_msgs")
	for _, q := range []string{
		`CREATE TABLE ` + msgs + ` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL UNIQUE,
			payload jsonb NOT NULL, state text NOT NULL DEFAULT 'pending')`,
		`CREATE INDEX ON ` + msgs + ` (id) WHERE state = 'pending'`,
	} {
		if _, err := s.env.Admin.Exec(ctx, q); err != nil {
			return "", err
		}
	}
	return msgs, nil
}

// claimedBatch is the claimed messages of one batch transaction of a raw drain.
type claimedBatch struct {
	ids     []int64
	keys    []string
	amounts []int64
}

// scan replaces b's messages with rows (id, key, payload), decoding each payload's amount.
func (b *claimedBatch) scan(rows pgx.Rows) error {
	b.ids, b.keys, b.amounts = b.ids[:0], b.keys[:0], b.amounts[:0]
	var (
		id  int64
		key string
		raw []byte
		p   rawPayload
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &key, &raw}, func() error {
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		b.ids, b.keys, b.amounts = append(b.ids, id), append(b.keys, key), append(b.amounts, p.Amount)
		return nil
	})
	return err
}

// timeBatches starts the monitor and the clock, runs workers goroutines, each calling the batch
// function newBatch(i) returns until it reports 0 messages or an error, and returns the rate of n
// messages and the footprint once every worker is done and the ledger holds n rows.
func (s *Schema) timeBatches(ctx context.Context, n, workers int, newBatch func(i int) func() (int, error)) (float64, Footprint, error) {
	batches := make([]func() (int, error), workers)
	for i := range batches {
		batches[i] = newBatch(i)
	}
	mon := s.env.StartMonitor(ctx, s.App)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for _, batch := range batches {
		wg.Go(func() {
			for {
				got, err := batch()
				if err != nil {
					errs <- err
					return
				}
				if got == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	fp := mon.Stop()
	close(errs)
	if err := <-errs; err != nil {
		return 0, fp, err
	}
	if err := s.checkLedger(ctx, n); err != nil {
		return 0, fp, err
	}
	return float64(n) / elapsed.Seconds(), fp, nil
}
