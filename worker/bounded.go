package worker

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
)

// batcher is what pgxpool.Pool, pgx.Conn and pgx.Tx offer to send statements in one pipeline.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// bounded runs each statement on db with statement_timeout set to timeout for that statement only:
// a set_config local to the statement's transaction is sent ahead of it in one pipeline (one Sync,
// so one implicit transaction, and no extra round trip). The bound holds on the server, so that a
// statement outliving it is cancelled there, its row locks and snapshot released, even when the
// client has gone. A db that cannot pipeline (no SendBatch) runs both in a transaction of its own.
type bounded struct {
	db      txinbox.DB
	timeout string // milliseconds
}

func newBounded(db txinbox.DB, timeout time.Duration) bounded {
	return bounded{db: db, timeout: strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)}
}

const setStatementTimeout = "SELECT set_config('statement_timeout', $1, true)"

// send sends the bound and sql with args; the caller reads sql's results from the returned
// BatchResults (the bound's are read here) and then calls end.
func (b bounded) send(ctx context.Context, sql string, args []any) (br pgx.BatchResults, end func() error, err error) {
	batch := &pgx.Batch{}
	batch.Queue(setStatementTimeout, b.timeout)
	batch.Queue(sql, args...)
	end = func() error { return br.Close() }
	if s, ok := b.db.(batcher); ok {
		br = s.SendBatch(ctx, batch)
	} else {
		tx, err := b.db.Begin(ctx)
		if err != nil {
			return nil, nil, err
		}
		br = tx.SendBatch(ctx, batch)
		end = func() error {
			if err := br.Close(); err != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				return err
			}
			return tx.Commit(ctx)
		}
	}
	if _, err := br.Exec(); err != nil {
		return nil, nil, ended(err, end)
	}
	return br, end, nil
}

// ended calls end and returns err, or end's error if err is nil (when a statement failed, closing
// the pipeline reports that error again).
func ended(err error, end func() error) error {
	if endErr := end(); err == nil {
		return endErr
	}
	return err
}

func (b bounded) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, end, err := b.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, ended(err, end)
}

func (b bounded) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, end, err := b.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, ended(err, end)
	}
	return &boundedRows{Rows: rows, end: end}, nil
}

func (b bounded) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := b.Query(ctx, sql, args...)
	return &row{rows: rows, err: err}
}

// boundedRows ends the pipeline (or the transaction) when the rows are closed; Err reports what
// ending it returned.
type boundedRows struct {
	pgx.Rows
	end    func() error
	ended  bool
	endErr error
}

func (r *boundedRows) Close() {
	r.Rows.Close()
	if !r.ended {
		r.ended = true
		r.endErr = r.end()
	}
}

func (r *boundedRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.endErr
}

func (r *boundedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}
