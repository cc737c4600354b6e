package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/pooler"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// The life of a batch, one file each: its claim (this file), the run of its handlers (handle.go, with
// the bisection of a batch handler's failing calls in bisect.go), its finish (finish.go). The pool
// (pool.go) only schedules batches; its rescuer (rescue.go) charges the batches that never finished.

// claimed is one claimed message.
type claimed struct {
	ID            int64
	Consumer      string
	Key           string
	Kind          string
	Payload       []byte
	Headers       map[string]string
	OrderingKey   string
	Token         int64
	Attempt       int // this attempt's number: the attempts counted so far, plus one
	Failed        int
	PreviousError string
	ReceivedAt    time.Time
}

// batch is one batch transaction, from its claim to its end: the messages it runs and what its
// finish, Stop and the rescuer need to know of it.
type batch struct {
	tx      pgx.Tx
	msgs    []*claimed // the messages it runs, by id
	xid     string     // its transaction's id
	started time.Time  // its start, on the server's clock
	record  int64      // its inbox_batch row, once recorded (set under Pool.mu)
	// suspects: claimed by the rescuer (ClaimSuspects), to isolate a message that may kill its process.
	suspects bool

	conn      net.Conn    // its transaction's connection (guarded by Pool.mu)
	abandoned atomic.Bool // Stop gave up on it: closed its connection
}

// claim begins a batch transaction and claims up to the pool's claim size of ready messages in it
// (suspects, for the rescuer), all in one round trip: the claim bounded by the claim timeout (Config.Lease), then the
// batch's own bounds and its transaction's id. If it claimed any, it records the batch (RecordBatch,
// committed on its own) and returns it, tracked for Stop; else it rolls back and returns nil.
//
// A pool with both kinds of handlers claims for its batch handlers, up to their BatchSize; the
// messages of single handlers beyond Config.BatchSize (the subtransactions a transaction can afford)
// are left out of the batch: the claim wrote nothing, so they are free again when it ends.
//
// Behind a pooler (records.pooled), the claim takes the pool's turn before its transaction takes a
// server session, and keeps it until the batch is recorded: a record needs another server session
// while the batch's transaction holds one, and runners holding sessions while they wait for their
// turn could otherwise take every session of the pooler, each then waiting for one to record in.
func (p *Pool) claim(ctx context.Context, suspects bool) (*batch, error) {
	turnFirst := p.records.pooled.Load()
	if turnFirst {
		if err := p.takeTurn(ctx); err != nil {
			return nil, p.claimErr(ctx, err)
		}
		defer p.giveTurn()
	}
	tx, err := p.store.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	b := &batch{tx: tx, suspects: suspects}
	p.track(b)
	msgs, err := p.claimIn(ctx, b, turnFirst)
	if err != nil || len(msgs) == 0 {
		p.endTx(ctx, b)
		p.untrack(b)
		return nil, p.claimErr(ctx, err)
	}
	b.msgs = p.runnable(msgs)
	ids, _ := idsTokens(b.msgs)
	err = p.records.do(ctx, p.store.DB, func(db sqlc.DBTX) error {
		record, err := schemasql.Queries.RecordBatch(ctx, p.eng.St.Wrap(db), sqlc.RecordBatchParams{
			Consumer: p.cfg.Consumer, Xid: b.xid, Ids: ids, Owner: p.cfg.Owner})
		p.mu.Lock() // Stop and the rescuer read it
		b.record = record
		p.mu.Unlock()
		return err
	})
	if err != nil {
		p.endTx(ctx, b)
		p.untrack(b)
		return nil, fmt.Errorf("recording the batch: %w", err)
	}
	return b, nil
}

// The claim cursor. A pool's runners claim in turn (Pool.turn), and a claim of ready messages
// starts where the pool's last full claim ended in claim order (run_at, id): past the rows of the
// pool's own batches in flight, which lie ahead of it in the queue. Without the cursor, each claim's
// index scan walked those rows (about three batches of them with four runners) and tried each with
// FOR UPDATE SKIP LOCKED: docs/design/claim.md, "The claim cursor". Rows can become ready behind the
// cursor: a message whose receiving transaction committed late (run_at is its transaction's start),
// a message a rolled-back batch handed back, the next message of an ordering key (ReadyNext keeps its
// place in claim order), messages left out of a mixed batch. So a claim starts at the head of the
// queue again when the last claim was not full (the queue past the cursor is empty), and after
// cursorClaims claims from the cursor or cursorLife since a claim from the head set it: a row behind
// the cursor waits at most that long more than it would at the head. The rescuer's claims of
// suspects use no cursor (they read another index, in a claim of their own).
type cursor struct {
	runAt  pgtype.Timestamptz // the last row of the last full claim; not Valid: start at the head
	id     int64
	claims int           // claims made from the cursor since a claim from the head set it
	since  time.Time     // when a claim from the head set it
	life   time.Duration // cursorLife unless a test set it
}

const (
	cursorClaims = 8
	cursorLife   = time.Second
)

// from returns where the next claim starts (NULLs: at the head), and counts the claim.
func (c *cursor) from() (pgtype.Timestamptz, pgtype.Int8) {
	if !c.runAt.Valid || c.claims >= cursorClaims || time.Since(c.since) >= cmp.Or(c.life, cursorLife) {
		c.runAt.Valid = false
		return pgtype.Timestamptz{}, pgtype.Int8{}
	}
	c.claims++
	return c.runAt, pgtype.Int8{Int64: c.id, Valid: true}
}

// after moves the cursor past a claim that returned rows, out of most: to its last row in claim order
// when it was full, else back to the head.
func (c *cursor) after(rows []sqlc.ClaimBatchRow, most int) {
	if len(rows) < most {
		c.runAt.Valid = false
		return
	}
	if !c.runAt.Valid { // a claim from the head
		c.claims, c.since = 0, time.Now()
	}
	for _, r := range rows {
		if !c.runAt.Valid || r.RunAt.Time.After(c.runAt.Time) || (r.RunAt.Time.Equal(c.runAt.Time) && r.ID > c.id) {
			c.runAt, c.id = r.RunAt, r.ID
		}
	}
}

// claimIn sends, in b's transaction and in one pipeline, ClaimLimits, the claim and BatchLimits. A
// claim of ready messages waits for its turn among the pool's runners (unless haveTurn: its caller
// holds it) and starts at the pool's cursor.
func (p *Pool) claimIn(ctx context.Context, b *batch, haveTurn bool) ([]*claimed, error) {
	if !b.suspects && !haveTurn {
		if err := p.takeTurn(ctx); err != nil {
			return nil, err
		}
		defer p.giveTurn()
	}
	claimTimeout := "0" // no bound
	if p.cfg.tune.ClaimTimeout > 0 {
		claimTimeout = millis(p.cfg.tune.ClaimTimeout)
	}
	idle, statement := millis(p.cfg.Lease), millis(p.maxTO+time.Second)
	suspects := sqlc.ClaimSuspectsParams{Consumer: p.cfg.Consumer, Max: int32(p.claimMax), LockKey: p.lockKey}
	var rows []sqlc.ClaimBatchRow
	var limits sqlc.BatchLimitsRow
	var after pgtype.Timestamptz
	var afterID pgtype.Int8
	if !b.suspects {
		after, afterID = p.cursor.from() // once per claim: f below runs twice (queue, then read)
	}
	err := p.pipeline(ctx, b.tx, func(db sqlc.DBTX) []error {
		errs := []error{schemasql.Queries.ClaimLimits(ctx, db, claimTimeout, idle), nil, nil}
		if b.suspects {
			var srows []sqlc.ClaimSuspectsRow
			srows, errs[1] = schemasql.Queries.ClaimSuspects(ctx, db, suspects)
			rows = rows[:0]
			for _, r := range srows {
				rows = append(rows, sqlc.ClaimBatchRow(r))
			}
		} else {
			rows, errs[1] = schemasql.Queries.ClaimBatch(ctx, db, sqlc.ClaimBatchParams{
				Consumer: p.cfg.Consumer, AfterRunAt: after, AfterID: afterID, Max: int32(p.claimMax)})
		}
		limits, errs[2] = schemasql.Queries.BatchLimits(ctx, db, statement)
		return errs
	})
	if !b.suspects {
		if err != nil {
			p.cursor.runAt.Valid = false // the claim rolls back: start again at the head
		} else {
			p.cursor.after(rows, p.claimMax)
		}
	}
	if err != nil {
		return nil, err
	}
	b.xid, b.started = limits.Xid, limits.StartedAt.Time
	msgs := make([]*claimed, len(rows))
	for i, r := range rows {
		msgs[i] = fromRow(r)
	}
	return msgs, nil
}

// takeTurn waits for the pool's claim turn (Pool.turn) or ctx's end; giveTurn gives it back.
func (p *Pool) takeTurn(ctx context.Context) error {
	select {
	case p.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Pool) giveTurn() { <-p.turn }

// records is the connection that batches are recorded on (RecordBatch): one per pool, outside its
// pgxpool and kept for the pool's life (reopened when lost), so that a runner holding its batch's
// connection never waits for another of the pool's, which the other batches may all hold. The
// runners take turns on it (a record is one short statement). With a DB that is not a
// *pgxpool.Pool, batches are recorded through the DB itself.
type records struct {
	mu      sync.Mutex
	connect func(context.Context) (*pgx.Conn, error) // nil: use the DB
	conn    *pgx.Conn
	closed  bool // the pool stopped: no more records
	// pooled: a pooler is between the pool and PostgreSQL (the pid of a connection's session is
	// not the one the connection was given), so that a record needs a server session of the
	// pooler's while the batch's transaction holds another (Pool.claim). Found by Start, and by each
	// opening of the records connection; assumed until then, when there is a connection to open.
	pooled atomic.Bool
}

var errStopped = errors.New("txinbox: the pool has stopped")

// recordTimeout bounds a record's statement (and opening the connection for it).
const recordTimeout = 10 * time.Second

// do runs f on the records connection (opened if needed), or on db if there is none.
func (r *records) do(ctx context.Context, db sqlc.DBTX, f func(sqlc.DBTX) error) error {
	if r.connect == nil {
		return f(db)
	}
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errStopped
	}
	if r.conn == nil || r.conn.IsClosed() {
		c, err := r.connect(ctx)
		if err != nil {
			return err
		}
		pooled, err := pooler.Pooled(ctx, c)
		if err != nil {
			_ = c.Close(ctx)
			return err
		}
		r.pooled.Store(pooled)
		r.conn = c
	}
	return f(r.conn)
}

// close closes the records connection, if open.
func (r *records) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = r.conn.Close(ctx)
		r.conn = nil
	}
}

func millis(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

// pipeline sends the statements that f sends on s in one round trip (a pipeline with one Sync), each
// statement with a snapshot of its own. f is called twice, to queue the statements and then to read
// their results (it returns each statement's error, in order); the first error is returned.
func (p *Pool) pipeline(ctx context.Context, s schemasql.BatchSender, f func(sqlc.DBTX) []error) error {
	var q queue
	f(p.eng.St.Wrap(&q))
	br := s.SendBatch(ctx, &q.batch)
	err := firstErr(f(results{br}))
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// pipelined runs f's statements (see pipeline) on the pool's DB in one implicit transaction; on a DB
// that cannot pipeline, in a transaction of its own.
func (p *Pool) pipelined(ctx context.Context, f func(sqlc.DBTX) []error) error {
	if s, ok := p.store.DB.(schemasql.BatchSender); ok {
		return p.pipeline(ctx, s, f)
	}
	return pgx.BeginFunc(ctx, p.store.DB, func(tx pgx.Tx) error { return errors.Join(f(p.eng.St.Wrap(tx))...) })
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// queue is a sqlc.DBTX that queues each statement into a pgx.Batch instead of running it; the sqlc
// method then returns errQueued, which its caller ignores.
type queue struct{ batch pgx.Batch }

var errQueued = errors.New("queued, not run")

func (q *queue) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.batch.Queue(sql, args...)
	return pgconn.CommandTag{}, errQueued
}

func (q *queue) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.batch.Queue(sql, args...)
	return nil, errQueued
}

func (q *queue) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.batch.Queue(sql, args...)
	return &row{err: errQueued}
}

// results is a sqlc.DBTX that answers each statement with the next result of a sent pgx.Batch: the
// same sqlc methods that queued the statements read their results, in the same order.
type results struct{ br pgx.BatchResults }

func (r results) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) { return r.br.Exec() }
func (r results) Query(context.Context, string, ...any) (pgx.Rows, error)         { return r.br.Query() }
func (r results) QueryRow(context.Context, string, ...any) pgx.Row                { return r.br.QueryRow() }

// runnable returns the messages of a claim that the batch runs: all of them, but for the messages of
// single handlers beyond Config.BatchSize when the claim was sized for batch handlers.
func (p *Pool) runnable(msgs []*claimed) []*claimed {
	if p.claimMax <= p.cfg.BatchSize {
		return msgs
	}
	out, singles := msgs[:0:0], 0
	for _, c := range msgs {
		if h := p.cfg.Handlers.byKind[c.Kind]; h == nil || h.batch == nil {
			if singles++; singles > p.cfg.BatchSize {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// claimErr says so when err is the server cancelling a claim at its bound (Config.Lease).
func (p *Pool) claimErr(ctx context.Context, err error) error {
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "57014" && p.cfg.tune.ClaimTimeout > 0 && ctx.Err() == nil {
		return fmt.Errorf("claim cancelled on the server at its bound (%v); the rows it locked are free for other workers: %w", p.cfg.tune.ClaimTimeout, err)
	}
	return err
}

func fromRow(r sqlc.ClaimBatchRow) *claimed {
	c := &claimed{
		ID: r.ID, Consumer: r.Consumer, Key: r.Key, Kind: r.Kind, Payload: r.Payload,
		OrderingKey: r.OrderingKey.String, Token: r.Token, Attempt: int(r.AttemptsStarted) + 1,
		Failed: int(r.AttemptsFailed), PreviousError: r.LastError.String, ReceivedAt: r.ReceivedAt.Time,
	}
	if len(r.Headers) > 2 {
		_ = json.Unmarshal(r.Headers, &c.Headers) // stored by Receive as a JSON object of strings
	}
	return c
}

func idsTokens(cs []*claimed) (ids, tokens []int64) {
	ids, tokens = make([]int64, len(cs)), make([]int64, len(cs))
	for i, c := range cs {
		ids[i], tokens[i] = c.ID, c.Token
	}
	return ids, tokens
}
