package schemasql

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BatchSender is a DB that pipelines statements (a *pgxpool.Pool, a *pgx.Conn).
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Pipeline is a sqlc.DBTX that queues the statements given to Exec (and Queue, QueueRows) and sends
// them with the one given to Query, whose rows it returns, as one batch: one round trip, and, on a
// DB outside a transaction, one implicit transaction (a set_config(..., true) queued first holds for
// the statements after it, and ends with them). Close reads the batch's end (its commit). Exec's
// results (and errors) are those of the batch: Query returns the first error among them, after
// handing the rows of each statement queued by QueueRows to its read.
type Pipeline struct {
	db    BatchSender
	b     pgx.Batch
	reads map[int]func(pgx.Rows) error // by position in b: how the rows of a queued statement are read
	br    pgx.BatchResults
}

// NewPipeline returns an empty Pipeline that sends on db.
func NewPipeline(db BatchSender) *Pipeline { return &Pipeline{db: db} }

var errSent = errors.New("txinbox: pipeline already sent")

// Exec queues the statement; its result is read when the batch is sent (Query).
func (p *Pipeline) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if p.br != nil {
		return pgconn.CommandTag{}, errSent
	}
	p.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// Queue queues a statement whose result is not read.
func (p *Pipeline) Queue(sql string, args ...any) { p.b.Queue(sql, args...) }

// QueueRows queues a statement whose rows read reads when the batch is sent.
func (p *Pipeline) QueueRows(sql string, args []any, read func(pgx.Rows) error) {
	if p.reads == nil {
		p.reads = map[int]func(pgx.Rows) error{}
	}
	p.reads[p.b.Len()] = read
	p.b.Queue(sql, args...)
}

// Query queues the statement, sends the batch, reads the results of the statements queued before it
// and returns its rows.
func (p *Pipeline) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p.br != nil {
		return nil, errSent
	}
	p.b.Queue(sql, args...)
	p.br = p.db.SendBatch(ctx, &p.b)
	for i := range p.b.Len() - 1 {
		read := p.reads[i]
		if read == nil {
			if _, err := p.br.Exec(); err != nil {
				return nil, err
			}
			continue
		}
		rows, err := p.br.Query()
		if err == nil {
			err = read(rows) // closes rows
		}
		if err != nil {
			return nil, err
		}
	}
	return p.br.Query()
}

// QueryRow is not supported in a pipeline: its row's Scan returns an error.
func (p *Pipeline) QueryRow(context.Context, string, ...any) pgx.Row {
	return errRow{errors.New("txinbox: QueryRow in a pipeline")}
}

// Close ends the batch, once sent (nothing if it was not), and returns its error.
func (p *Pipeline) Close() error {
	if p.br == nil {
		return nil
	}
	return p.br.Close()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
