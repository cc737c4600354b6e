package chaos

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
)

// recvStats counts what the producers saw.
type recvStats struct {
	delivered atomic.Int64 // deliveries acknowledged (a receipt was returned)
	inserted  atomic.Int64
	duplicate atomic.Int64
	conflict  atomic.Int64
	resends   atomic.Int64
	errors    atomic.Int64
}

// maxBatch is the largest batch a producer sends in one receive.
const maxBatch = 40

// produce delivers every message 1 to MaxCopies times, in a random order, split over the producers,
// each pacing its deliveries over 90% of the chaos phase. It returns when all are acknowledged, or the
// first error that is not a database failure (an invalid message or a key conflict: a bug).
func (r *runner) produce(ctx context.Context, start time.Time) error {
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 4))
	var deliveries []int
	for i := range r.msgs {
		for range 1 + rng.IntN(r.cfg.MaxCopies) {
			deliveries = append(deliveries, i)
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	r.rep.Deliveries = len(deliveries)
	r.rep.Duplicates = len(deliveries) - len(r.msgs)

	shares := make([][]int, r.cfg.Producers)
	for j, d := range deliveries {
		shares[j%len(shares)] = append(shares[j%len(shares)], d)
	}
	spread := r.cfg.Duration * 9 / 10
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for p, share := range shares {
		wg.Go(func() {
			if err := r.producer(ctx, p, share, start, spread); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	return first
}

func (r *runner) producer(ctx context.Context, p int, share []int, start time.Time, spread time.Duration) error {
	cfg, err := poolConfig(r.cfg.URL, r.appName(fmt.Sprintf("producer-%d", p)), 1)
	if err != nil {
		return err
	}
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	c, err := inbox.New(txinbox.Store{DB: db, Schema: r.cfg.Schema}, inbox.Config{})
	if err != nil {
		return err
	}
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, uint64(100+p)))
	for pos := 0; pos < len(share); {
		n := min(1+rng.IntN(maxBatch), len(share)-pos)
		batch := make([]inbox.Message, n)
		for i, d := range share[pos : pos+n] {
			m := &r.msgs[d]
			batch[i] = inbox.Message{Consumer: Consumer, Key: m.key, Kind: m.kind, Payload: m.payload}
		}
		// Pace: this batch is due when its share of the spread has elapsed.
		due := start.Add(time.Duration(float64(spread) * float64(pos+n) / float64(len(share))))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := r.send(ctx, c, db, rng, batch); err != nil {
			return err
		}
		pos += n
	}
	return nil
}

// send receives batch, re-sending it after any database error until it gets receipts: at-least-once
// delivery, where a receive whose outcome is unknown (its commit may or may not have happened) is
// simply sent again and the inbox deduplicates it.
func (r *runner) send(ctx context.Context, c *inbox.Client, db *pgxpool.Pool, rng *mrand.Rand, batch []inbox.Message) error {
	mode := rng.IntN(10)
	backoff := 20 * time.Millisecond
	for {
		rs, err := receive(ctx, c, db, mode, batch)
		if err == nil {
			r.recv.delivered.Add(int64(len(rs)))
			for _, rc := range rs {
				switch rc.Outcome {
				case inbox.Inserted:
					r.recv.inserted.Add(1)
				case inbox.Duplicate:
					r.recv.duplicate.Add(1)
				case inbox.Conflict:
					r.recv.conflict.Add(1)
				}
			}
			return nil
		}
		if errors.Is(err, txinbox.ErrInvalidMessage) || errors.Is(err, inbox.ErrKeyConflict) {
			return fmt.Errorf("receive rejected a valid message: %w", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gave up re-sending (%v): %w", ctx.Err(), err)
		}
		r.recv.errors.Add(1)
		r.recv.resends.Add(1)
		jitter := time.Duration(rng.Int64N(int64(backoff)))
		select {
		case <-time.After(backoff/2 + jitter):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// receive sends batch one of three ways: Receive for a single message (half the time), ReceiveManyTx
// in a transaction of the producer's own (one time in ten: a commit that fails leaves the outcome
// unknown), ReceiveMany otherwise.
func receive(ctx context.Context, c *inbox.Client, db *pgxpool.Pool, mode int, batch []inbox.Message) ([]inbox.Receipt, error) {
	switch {
	case len(batch) == 1 && mode < 5:
		rc, err := c.Receive(ctx, batch[0])
		if err != nil {
			return nil, err
		}
		return []inbox.Receipt{rc}, nil
	case mode == 9:
		tx, err := db.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		rs, err := c.ReceiveManyTx(ctx, tx, batch)
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		return rs, nil
	default:
		return c.ReceiveMany(ctx, batch)
	}
}
