package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// RiverConfig is one River drain.
type RiverConfig struct {
	// Tx: the worker inserts the ledger row and completes the job in one transaction
	// (river.JobCompleteTx), the guarantee txinbox gives. Otherwise the worker does nothing and River
	// completes the job after it returns, in its batched completer (River's own benchmark workload).
	Tx         bool
	MaxWorkers int   // River queue MaxWorkers
	PoolConns  int32 // pgxpool MaxConns
	// FetchCooldown and FetchPollInterval: River's benchmark uses 2 ms and 20 ms.
	FetchCooldown, FetchPollInterval time.Duration
}

func (c RiverConfig) String() string {
	return fmt.Sprintf("MaxWorkers=%d, pool=%d conns, FetchCooldown=%s, FetchPollInterval=%s",
		c.MaxWorkers, c.PoolConns, c.FetchCooldown, c.FetchPollInterval)
}

type riverArgs struct {
	N      int   `json:"n"`
	Amount int64 `json:"amount"`
}

func (riverArgs) Kind() string { return "txbench" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	pool   *pgxpool.Pool
	insert string
	tx     bool
	done   *atomic.Int64
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	if !w.tx {
		return nil
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, w.insert, eventKey(job.Args.N), job.Args.Amount); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	w.done.Add(1)
	return nil
}

// RiverDrain runs one River drain of n pre-inserted jobs and returns jobs/s and the footprint. In
// Tx mode a job counts when its transaction commits; otherwise when River reports it completed
// (after its completer has written the completion, as River's own benchmark counts).
func (e *Env) RiverDrain(ctx context.Context, n int, cfg RiverConfig) (float64, Footprint, error) {
	name := "rivernoop"
	if cfg.Tx {
		name = "rivertx"
	}
	s, err := e.NewSchema(ctx, name, cfg.PoolConns)
	if err != nil {
		return 0, Footprint{}, err
	}
	defer s.Drop(ctx)
	driver := riverpgxv5.New(s.Pool)
	mig, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: s.Name, Logger: e.quietLogger()})
	if err != nil {
		return 0, Footprint{}, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, Footprint{}, fmt.Errorf("river migrate: %w", err)
	}
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{
		pool: s.Pool, tx: cfg.Tx, done: &done,
		insert: "INSERT INTO " + s.T("ledger") + " (event_id, amount) VALUES ($1, $2)",
	})
	client, err := river.NewClient(driver, &river.Config{
		Schema:            s.Name,
		Logger:            e.quietLogger(),
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return 0, Footprint{}, err
	}
	const batch = 5000
	params := make([]river.InsertManyParams, 0, batch)
	for i := 1; i <= n; i++ {
		params = append(params, river.InsertManyParams{Args: riverArgs{N: i, Amount: int64(i%100 + 1)}})
		if len(params) == batch || i == n {
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				return 0, Footprint{}, err
			}
			params = params[:0]
		}
	}
	params = nil
	if err := s.Settle(ctx); err != nil {
		return 0, Footprint{}, err
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancelSub()

	mon := e.StartMonitor(ctx, s.App)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, mon.Stop(), err
	}
	var completed, failed int
	deadline := time.After(drainTimeout(n))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
wait:
	for {
		if cfg.Tx && done.Load() >= int64(n) {
			break
		}
		select {
		case ev := <-events:
			if ev.Kind == river.EventKindJobCompleted {
				completed++
			} else {
				failed++
			}
			if !cfg.Tx && completed+failed >= n {
				break wait
			}
		case <-tick.C:
		case <-deadline:
			break wait
		}
	}
	elapsed := time.Since(start)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stopErr := client.Stop(stopCtx)
	fp := mon.Stop()
	if stopErr != nil {
		return 0, fp, stopErr
	}
	if failed > 0 {
		return 0, fp, fmt.Errorf("river: %d jobs failed", failed)
	}
	worked := completed
	if cfg.Tx {
		worked = int(done.Load())
		if err := s.checkLedger(ctx, n); err != nil {
			return 0, fp, err
		}
	}
	if worked < n {
		return 0, fp, errors.New("river: timed out before every job was worked")
	}
	return float64(n) / elapsed.Seconds(), fp, nil
}

// drainTimeout bounds a drain of n messages (at 200 messages/s or more).
func drainTimeout(n int) time.Duration { return time.Duration(n/200+60) * time.Second }
