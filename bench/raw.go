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
	msgs := s.T("raw_msgs")
	// The naive one-table design: a partial index on pending rows, the status updated in place.
	for _, q := range []string{
		`CREATE TABLE ` + msgs + ` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL UNIQUE,
			payload jsonb NOT NULL, state text NOT NULL DEFAULT 'pending')`,
		`CREATE INDEX ON ` + msgs + ` (id) WHERE state = 'pending'`,
	} {
		if _, err := e.Admin.Exec(ctx, q); err != nil {
			return 0, Footprint{}, err
		}
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
	mon := e.StartMonitor(ctx, s.App)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Clients)
	for _, c := range conns {
		wg.Go(func() {
			ids := make([]int64, 0, cfg.PerTx)
			keys := make([]string, 0, cfg.PerTx)
			amounts := make([]int64, 0, cfg.PerTx)
			for {
				ids, keys, amounts = ids[:0], keys[:0], amounts[:0]
				err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
					rows, err := tx.Query(ctx, claim, cfg.PerTx)
					if err != nil {
						return err
					}
					var (
						id  int64
						key string
						raw []byte
						p   rawPayload
					)
					_, err = pgx.ForEachRow(rows, []any{&id, &key, &raw}, func() error {
						if err := json.Unmarshal(raw, &p); err != nil {
							return err
						}
						ids, keys, amounts = append(ids, id), append(keys, key), append(amounts, p.Amount)
						return nil
					})
					if err != nil || len(ids) == 0 {
						return err
					}
					if _, err := tx.Exec(ctx, insert, keys, amounts); err != nil {
						return err
					}
					_, err = tx.Exec(ctx, update, ids)
					return err
				})
				if err != nil {
					errs <- err
					return
				}
				if len(ids) == 0 {
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
