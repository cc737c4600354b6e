package worker

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
)

// Each step of a batch runs in a savepoint, so that its failure rolls back only its own writes: a run
// of single handlers' messages in one while none fails, then each of its messages in one of its own
// (runSingles in handle.go), and each call of a batch handler in one. To keep that at no extra round
// trip, the savepoint is established lazily: the first statement a handler sends goes out in one
// pipeline with "RELEASE SAVEPOINT" (of the previous step, merging its work into the batch) and
// "SAVEPOINT". A step that writes nothing costs no savepoint at all, and rolling back is needed only
// when a handler had sent something.

const savepointName = "txinbox_message"

// savepoints tracks the batch transaction's savepoint of the current step (its "current message": the
// one whose handler runs, in a savepoint of its own or of its run).
type savepoints struct {
	tx     pgx.Tx
	open   bool  // a txinbox savepoint exists (from an earlier message)
	needed bool  // the current message has not established its savepoint yet
	used   bool  // the current message established its savepoint, so it may have written
	failed error // a statement of the current message failed (the handler may have ignored it)
	broken error // the savepoint statements themselves failed: the batch transaction is unusable
	byCall bool  // broken by the context the handler gave its statement (its deadline, or a cancel)
}

// next prepares for the next message.
func (s *savepoints) next() { s.needed, s.used, s.failed = true, false, nil }

// prefix returns the statements to send before the current message's first statement.
func (s *savepoints) prefix() []string {
	if !s.needed {
		return nil
	}
	s.needed = false
	if s.open {
		return []string{"RELEASE SAVEPOINT " + savepointName, "SAVEPOINT " + savepointName}
	}
	return []string{"SAVEPOINT " + savepointName}
}

// established records that the prefix ran.
func (s *savepoints) established() { s.open, s.used = true, true }

// rollback undoes the current message's writes, if it may have made any.
func (s *savepoints) rollback(ctx context.Context) error {
	if !s.used {
		return nil
	}
	_, err := s.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepointName)
	return err
}

// note records err as the current message's failed statement if it is a PostgreSQL error and none is
// recorded yet (errUnobserved gives way to it).
func (s *savepoints) note(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (s.failed == nil || errors.Is(s.failed, errUnobserved)) {
		s.failed = err
	}
}

// errUnobserved stands in savepoints.failed for statements whose errors the worker does not see.
var errUnobserved = errors.New("a statement sent through tx.Conn(), tx.LargeObjects() or a nested transaction (its error is not seen by the worker)")

// unobserved records that the current message may send statements whose errors the worker does not
// see, so that the worker checks, when the handler returns nil, whether the transaction was left
// aborted (at the cost of one round trip).
func (s *savepoints) unobserved() {
	if s.failed == nil {
		s.failed = errUnobserved
	}
}

// flush establishes the savepoint now, in a round trip of its own (before statements that cannot be
// pipelined).
func (s *savepoints) flush(ctx context.Context) error {
	if pre := s.prefix(); len(pre) > 0 {
		b := &pgx.Batch{}
		for _, q := range pre {
			b.Queue(q)
		}
		if err := s.tx.SendBatch(ctx, b).Close(); err != nil {
			s.prefixFailed(ctx, err)
			return err
		}
	}
	s.established()
	return nil
}

// prefixFailed records the failure (err) of the savepoint statements that were to go out before a
// statement the handler sent on ctx.
//   - ctx had ended before anything was sent (pgconn.SafeToRetry) and the connection is open: the
//     transaction is as it was. The savepoint is still to be established, and the handler gets the
//     error of its statement, as it would without a savepoint; its call fails as its own (a timeout
//     if its deadline passed).
//   - ctx ended while the statements were under way: the transaction is unusable (pgx closes the
//     connection of a statement whose context ends), and it is the handler's call that cost it.
//   - Otherwise the connection failed on its own: the transaction is unusable, by no one message.
func (s *savepoints) prefixFailed(ctx context.Context, err error) {
	switch {
	case ctx.Err() == nil:
		s.broken = err
	case pgconn.SafeToRetry(err) && !s.tx.Conn().IsClosed():
		s.needed = true
	default:
		s.broken, s.byCall = err, true
	}
}

// handlerTx is the transaction given to handlers: the batch transaction with the message's savepoint
// established before anything the handler sends. It implements every method of pgx.Tx itself (it
// does not embed one), so that no method can reach the connection past the savepoint:
//   - Exec, Query and QueryRow pipeline the savepoint with their statement;
//   - Begin, CopyFrom, SendBatch, Prepare, LargeObjects and Conn establish it first, in a round trip
//     of its own;
//   - Commit and Rollback are refused with txinbox.ErrTxManaged (the worker ends the transaction).
//
// A method pgx adds to pgx.Tx later breaks the build here (see the assertion below) until it is
// implemented the same way.
type handlerTx struct {
	Tx pgx.Tx // the batch transaction; named, not embedded: every method is written out below
	sp *savepoints
}

var _ pgx.Tx = (*handlerTx)(nil)

// Commit returns txinbox.ErrTxManaged and does nothing.
func (*handlerTx) Commit(context.Context) error { return txinbox.ErrTxManaged }

// Rollback returns txinbox.ErrTxManaged and does nothing.
func (*handlerTx) Rollback(context.Context) error { return txinbox.ErrTxManaged }

// pipelinable reports whether a statement with args can be queued in a pgx.Batch after the savepoint
// statements: not without arguments (the simple protocol allows several statements in one string) and
// not with per-query options that batches ignore.
func pipelinable(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

// send queues the savepoint prefix and the statement in one batch; the caller reads the statement's
// result from the returned BatchResults and closes it.
func (t *handlerTx) send(ctx context.Context, pre []string, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	for _, q := range pre {
		b.Queue(q)
	}
	b.Queue(sql, args...)
	br := t.Tx.SendBatch(ctx, b)
	for range pre {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			t.sp.prefixFailed(ctx, err)
			return nil, err
		}
	}
	t.sp.established()
	return br, nil
}

// Exec runs sql, sent in one pipeline with the message's savepoint when it is the message's first
// statement and has arguments (otherwise the savepoint is established in a round trip of its own).
func (t *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	pre := t.sp.prefix()
	if len(pre) > 0 && !pipelinable(args) {
		t.sp.needed = true
		if err := t.sp.flush(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		pre = nil
	}
	if len(pre) == 0 {
		tag, err := t.Tx.Exec(ctx, sql, args...)
		t.sp.note(err)
		return tag, err
	}
	br, err := t.send(ctx, pre, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	t.sp.note(err)
	return tag, err
}

// Query runs sql and returns its rows; the savepoint is established as for Exec.
func (t *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	pre := t.sp.prefix()
	if len(pre) > 0 && !pipelinable(args) {
		t.sp.needed = true
		if err := t.sp.flush(ctx); err != nil {
			return nil, err
		}
		pre = nil
	}
	if len(pre) == 0 {
		rows, err := t.Tx.Query(ctx, sql, args...)
		if err != nil {
			t.sp.note(err)
			return nil, err
		}
		return &noteRows{Rows: rows, sp: t.sp}, nil
	}
	br, err := t.send(ctx, pre, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		t.sp.note(err)
		return nil, err
	}
	return &noteRows{Rows: rows, sp: t.sp, br: br}, nil
}

// QueryRow runs sql as Query does and returns its first row.
func (t *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &row{rows: rows, err: err}
}

// The remaining methods establish the savepoint first, in its own round trip.

// Begin establishes the message's savepoint and starts a nested transaction (a savepoint inside it).
// The nested transaction's errors are not seen by the worker, which checks as for Conn whether the
// transaction was left aborted (a handler that rolled the nested transaction back has recovered).
func (t *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.sp.flush(ctx); err != nil {
		return nil, err
	}
	t.sp.unobserved()
	nested, err := t.Tx.Begin(ctx)
	t.sp.note(err)
	return nested, err
}

// CopyFrom establishes the message's savepoint and copies the rows in.
func (t *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.sp.flush(ctx); err != nil {
		return 0, err
	}
	n, err := t.Tx.CopyFrom(ctx, table, cols, src)
	t.sp.note(err)
	return n, err
}

// SendBatch establishes the message's savepoint and sends b; the failures its results report are
// recorded as the message's.
func (t *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.sp.flush(ctx); err != nil {
		return errBatchResults{err}
	}
	return &noteBatch{BatchResults: t.Tx.SendBatch(ctx, b), sp: t.sp}
}

// Prepare establishes the message's savepoint and prepares the statement.
func (t *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.sp.flush(ctx); err != nil {
		return nil, err
	}
	sd, err := t.Tx.Prepare(ctx, name, sql)
	t.sp.note(err)
	return sd, err
}

// LargeObjects establishes the message's savepoint and returns the transaction's large objects.
// Large objects send their statements directly, and the method takes no context: the savepoint is
// established without one, and a failure to establish it breaks the batch (reported after the
// handler returns, the whole batch rolled back). Their errors are not seen by the worker, which
// checks as for Conn whether the transaction was left aborted.
func (t *handlerTx) LargeObjects() pgx.LargeObjects {
	_ = t.sp.flush(context.Background())
	t.sp.unobserved()
	return t.Tx.LargeObjects()
}

// Conn establishes the message's savepoint and returns the connection the batch transaction runs on.
// What the handler sends through it from then on is inside the savepoint, so it is rolled back when
// the message fails, as with the other methods. The method takes no context: the savepoint is
// established without one, and a failure to establish it breaks the batch (reported after the
// handler returns, the whole batch rolled back). The errors of statements sent through the
// connection are not seen by the worker: when the handler returns nil, the worker checks (one round
// trip) whether the transaction was left aborted, and fails the message if it was. The connection
// must not be used to end the transaction (Begin, Commit or pgx.BeginFunc on the *pgx.Conn, or
// COMMIT): a handler that does is dead at once, and the pool records what the ended transaction
// committed (the outcomes of the messages before it in the batch) or hands them back if it rolled back.
func (t *handlerTx) Conn() *pgx.Conn {
	_ = t.sp.flush(context.Background())
	t.sp.unobserved()
	return t.Tx.Conn()
}

// noteRows records a failed statement when rows end, and closes the batch it came from.
type noteRows struct {
	pgx.Rows
	sp *savepoints
	br pgx.BatchResults
}

func (r *noteRows) Close() {
	r.Rows.Close()
	r.sp.note(r.Rows.Err())
	if r.br != nil {
		if err := r.br.Close(); err != nil {
			r.sp.note(err)
		}
		r.br = nil
	}
}

func (r *noteRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

// noteBatch records a failed statement of a batch sent with handlerTx.SendBatch.
type noteBatch struct {
	pgx.BatchResults
	sp *savepoints
}

func (b *noteBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	b.sp.note(err)
	return tag, err
}

func (b *noteBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if err != nil {
		b.sp.note(err)
		return nil, err
	}
	return &noteRows{Rows: rows, sp: b.sp}, nil
}

func (b *noteBatch) QueryRow() pgx.Row {
	rows, err := b.Query()
	return &row{rows: rows, err: err}
}

func (b *noteBatch) Close() error {
	err := b.BatchResults.Close()
	b.sp.note(err)
	return err
}

// row is pgx.Row over the rows of a Query (handlerTx.Query, bounded.Query).
type row struct {
	rows pgx.Rows
	err  error
}

func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

type errBatchResults struct{ err error }

func (e errBatchResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.err }
func (e errBatchResults) Query() (pgx.Rows, error)         { return nil, e.err }
func (e errBatchResults) QueryRow() pgx.Row                { return &row{err: e.err} }
func (e errBatchResults) Close() error                     { return e.err }

// Tx is pgx.BatchResults' (from pgx v5.12): no transaction was begun by the batch.
func (e errBatchResults) Tx() pgx.Tx { return nil }
