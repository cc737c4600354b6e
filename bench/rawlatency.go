package bench

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
)

// RawLatencyConfig is RawLatency's worker side: Clients connections each loop over one
// transaction that claims up to PerTx pending messages (SELECT ... FOR UPDATE SKIP LOCKED), inserts
// each one's ledger row with a statement of its own (as a single handler does), marks them done (one
// UPDATE) and commits; a loop whose claim took nothing sleeps Poll before claiming again.
type RawLatencyConfig struct {
	Clients int
	PerTx   int
	Poll    time.Duration
}

// RawLatency is SteadyLatency's schedule (rate messages per second, one per call, for d, from
// LatencySenders senders) against the raw SQL floor of the same guarantee: each message is one
// INSERT ... ON CONFLICT (key) DO NOTHING in a transaction of its own (a duplicate is dropped, as a
// Receive does), and cfg's loops take them. It measures the time from the INSERT returning to the
// message's ledger insert starting. Nothing else is done: no attempts, leases, fencing, retries,
// ordering or wake-up, so this is what the machine and PostgreSQL give at this rate before any
// queue's own work. The result has no Breakdown.
func (e *Env) RawLatency(ctx context.Context, rate int, d time.Duration, cfg RawLatencyConfig) (LatencyResult, error) {
	pc := newPaced(rate, 1, d)
	s, err := e.NewSchema(ctx, "rawlatency", int32(cfg.Clients+LatencySenders))
	if err != nil {
		return pc.res, err
	}
	defer s.Drop(ctx)
	msgs, err := s.rawMessages(ctx)
	if err != nil {
		return pc.res, err
	}
	if err := s.Settle(ctx); err != nil {
		return pc.res, err
	}
	receive := `INSERT INTO ` + msgs + ` (key, payload) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`
	claim := `SELECT id, (payload->>'n')::int, key, (payload->>'amount')::bigint FROM ` + msgs +
		` WHERE state = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`
	insert := `INSERT INTO ` + s.T("ledger") + ` (event_id, amount) VALUES ($1, $2)`
	update := `UPDATE ` + msgs + ` SET state = 'done' WHERE id = ANY($1::bigint[])`

	mon := e.StartMonitor(ctx, s.App)
	loopCtx, stop := context.WithCancel(ctx)
	loopErr := make(chan error, cfg.Clients)
	for range cfg.Clients {
		go func() { loopErr <- rawLoop(loopCtx, s, cfg, claim, insert, update, pc.handle) }()
	}
	_, err = pc.run(ctx, mon, func(_ int, m []inbox.Message) error {
		_, err := s.Pool.Exec(ctx, receive, m[0].Key, m[0].Payload)
		return err
	})
	stop()
	for range cfg.Clients {
		if lerr := <-loopErr; lerr != nil && !errors.Is(lerr, context.Canceled) && err == nil {
			err = lerr
		}
	}
	return pc.res, err
}

// rawLoop is one of RawLatency's worker loops, until ctx ends; handle is called with each message's
// number before its ledger insert.
func rawLoop(ctx context.Context, s *Schema, cfg RawLatencyConfig, claim, insert, update string, handle func(n int)) error {
	c, err := s.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	var ids []int64
	for {
		ids = ids[:0]
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, claim, cfg.PerTx)
			if err != nil {
				return err
			}
			type claimed struct {
				n      int
				key    string
				amount int64
			}
			var ms []claimed
			var m claimed
			var id int64
			if _, err := pgx.ForEachRow(rows, []any{&id, &m.n, &m.key, &m.amount}, func() error {
				ids, ms = append(ids, id), append(ms, m)
				return nil
			}); err != nil || len(ids) == 0 {
				return err
			}
			for _, m := range ms {
				handle(m.n)
				if _, err := tx.Exec(ctx, insert, m.key, m.amount); err != nil {
					return err
				}
			}
			_, err = tx.Exec(ctx, update, ids)
			return err
		})
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cfg.Poll):
			}
		}
	}
}
