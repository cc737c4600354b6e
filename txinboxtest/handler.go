package txinboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// Beginner starts a transaction: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx (whose Begin starts a
// savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Run is what [RunHandler] reports.
type Run struct {
	// Tx is the test transaction the handler ran in. It stays open until the test ends, so the test
	// can read through it what the handler wrote; it is then rolled back. The test must not commit it.
	Tx pgx.Tx
	// Err is what the handler returned: nil, an error, or a [txinbox.Permanent] one (check with
	// [txinbox.IsPermanent]). It is also a permanent error, without calling the handler, when the
	// payload does not decode into the handler's type; and the error of the savepoint's release when
	// the handler returned nil after a statement of its failed (the worker records a failure then too).
	Err error
	// Result is the JSON the handler stored with [worker.Message.SetResult], when Err is nil; else nil.
	Result []byte
}

// RunHandler runs fn on msg as a [worker.Pool] would, in a transaction begun on db that is rolled back
// when t ends, and returns the transaction and the outcome. It does not touch the inbox tables: msg
// need not have been received.
//
// As in a pool, fn runs in a savepoint: when it returns an error, what it wrote is rolled back;
// when it returns nil, its writes stay in [Run.Tx]. The transaction fn gets refuses Commit and
// Rollback with [txinbox.ErrTxManaged]. fn's ctx ends when t does (no handler timeout applies). A
// panic in fn is not recovered: it fails the test, as any panic in a test does.
//
// msg's payload reaches fn as a pool would give it: RawPayload, or if it is nil, Payload encoded as
// JSON, is decoded into a fresh T (encoding/json). Zero fields take these values: Consumer
// "txinboxtest", Key "txinboxtest-<random>", Kind "test", Attempt 1, ReceivedAt now. ID,
// Headers, OrderingKey and PreviousError are given to fn as they are.
func RunHandler[T any](t testing.TB, db Beginner, fn worker.HandlerFunc[T], msg worker.Message[T]) *Run {
	t.Helper()
	tx, err := db.Begin(context.Background())
	if err != nil {
		t.Fatalf("txinboxtest: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	run := &Run{Tx: tx}
	m, err := message(t, msg)
	if err != nil {
		run.Err = err
		return run
	}
	ctx := t.Context()
	exec := func(sql string) error { _, err := tx.Exec(ctx, sql); return err }
	if err := exec("SAVEPOINT " + savepoint); err != nil {
		t.Fatalf("txinboxtest: savepoint: %v", err)
	}
	run.Err = fn(ctx, managedTx{tx}, m)
	if run.Err == nil {
		if run.Err = exec("RELEASE SAVEPOINT " + savepoint); run.Err == nil {
			run.Result = m.Result()
			return run
		}
		run.Err = fmt.Errorf("txinboxtest: the handler returned nil, but its savepoint cannot be released "+
			"(a statement failed and the transaction is aborted): %w", run.Err)
	}
	if err := exec("ROLLBACK TO SAVEPOINT " + savepoint); err != nil {
		t.Fatalf("txinboxtest: roll back the handler's savepoint: %v", err)
	}
	if err := exec("RELEASE SAVEPOINT " + savepoint); err != nil {
		t.Fatalf("txinboxtest: release the handler's savepoint: %v", err)
	}
	return run
}

// savepoint names the savepoint that the handler runs in.
const savepoint = "txinboxtest_handler"

// message returns the Message a handler gets for msg: defaults filled in and the payload decoded from
// its JSON; a payload that does not decode is a permanent error, one that does not encode fails t.
func message[T any](t testing.TB, msg worker.Message[T]) (*worker.Message[T], error) {
	t.Helper()
	m := &worker.Message[T]{ID: msg.ID, Consumer: msg.Consumer, Key: msg.Key, Kind: msg.Kind,
		RawPayload: msg.RawPayload, Headers: msg.Headers, OrderingKey: msg.OrderingKey, Attempt: msg.Attempt,
		PreviousError: msg.PreviousError, ReceivedAt: msg.ReceivedAt}
	if m.Consumer == "" {
		m.Consumer = "txinboxtest"
	}
	if m.Key == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		m.Key = "txinboxtest-" + hex.EncodeToString(b)
	}
	if m.Kind == "" {
		m.Kind = "test"
	}
	if m.Attempt == 0 {
		m.Attempt = 1
	}
	if m.ReceivedAt.IsZero() {
		m.ReceivedAt = time.Now()
	}
	if m.RawPayload == nil {
		b, err := json.Marshal(msg.Payload)
		if err != nil {
			t.Fatalf("txinboxtest: encode the payload: %v", err)
		}
		m.RawPayload = b
	}
	if err := json.Unmarshal(m.RawPayload, &m.Payload); err != nil {
		return nil, txinbox.Permanent(fmt.Errorf("txinboxtest: payload does not decode into %T: %w", m.Payload, err))
	}
	return m, nil
}

// managedTx is the transaction given to the handler (inside its savepoint), whose Commit and Rollback
// are the worker's to call.
type managedTx struct{ pgx.Tx }

// Commit returns txinbox.ErrTxManaged and does nothing.
func (managedTx) Commit(context.Context) error { return txinbox.ErrTxManaged }

// Rollback returns txinbox.ErrTxManaged and does nothing.
func (managedTx) Rollback(context.Context) error { return txinbox.ErrTxManaged }
