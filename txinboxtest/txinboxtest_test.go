package txinboxtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest"
	"github.com/txinbox/txinbox/worker"
)

type credit struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

// insertCredit is the handler under test: it writes one row through the handler's transaction.
func insertCredit(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
	_, err := tx.Exec(ctx, "INSERT INTO credits (order_id, cents) VALUES ($1, $2)", m.Payload.OrderID, m.Payload.Cents)
	return err
}

// withCredits returns a fresh schema with a committed, empty credits table.
func withCredits(t *testing.T) *txinboxtest.DB {
	t.Helper()
	db := txinboxtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE credits (order_id text PRIMARY KEY, cents bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return db
}

func count(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// New gives a migrated schema of its own, on the search_path of its pool, on the server URL chooses;
// the schema is dropped when the test ends.
func TestNewSchemaIsMigratedOnTheSearchPathAndDropped(t *testing.T) {
	var schema string
	t.Run("inner", func(t *testing.T) {
		db := txinboxtest.New(t)
		schema = db.Schema
		if db.URL != txinboxtest.URL(t) {
			t.Errorf("DB.URL = %q, URL = %q", db.URL, txinboxtest.URL(t))
		}
		if n := count(t, db.Pool, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'inbox'", schema); n != 1 {
			t.Fatalf("the inbox table is not in %s", schema)
		}
		if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE mine (id int)"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db.Pool, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'mine'", schema); n != 1 {
			t.Fatalf("a table created through Pool is not in the test schema %s", schema)
		}
	})
	other := txinboxtest.New(t)
	if other.Schema == schema {
		t.Fatalf("two tests share the schema %s", schema)
	}
	if n := count(t, other.Pool, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema); n != 0 {
		t.Fatalf("the schema %s was not dropped when its test ended", schema)
	}
}

// A handler that returns nil keeps its writes in Run.Tx, which no other session sees and which is
// rolled back when the test ends.
func TestRunHandlerWritesStayInTheTestTransaction(t *testing.T) {
	db := withCredits(t)
	t.Run("inner", func(t *testing.T) {
		run := txinboxtest.RunHandler(t, db.Pool, insertCredit, worker.Message[credit]{Payload: credit{"o-1", 500}})
		if run.Err != nil {
			t.Fatal(run.Err)
		}
		if n := count(t, run.Tx, "SELECT count(*) FROM credits WHERE order_id = 'o-1' AND cents = 500"); n != 1 {
			t.Fatalf("the handler's row is not in Run.Tx (%d rows)", n)
		}
		if n := count(t, db.Pool, "SELECT count(*) FROM credits"); n != 0 {
			t.Fatalf("another session sees %d rows: the test transaction was committed", n)
		}
	})
	if n := count(t, db.Pool, "SELECT count(*) FROM credits"); n != 0 {
		t.Fatalf("%d rows after the test ended: the test transaction was not rolled back", n)
	}
}

// As in a pool, a handler's error rolls back its own writes (its savepoint), not the transaction.
func TestRunHandlerErrorRollsBackItsWrites(t *testing.T) {
	db := withCredits(t)
	boom := errors.New("boom")
	tx, err := db.Pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(context.Background(), "INSERT INTO credits VALUES ('before', 1)"); err != nil {
		t.Fatal(err)
	}
	run := txinboxtest.RunHandler(t, tx, func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := insertCredit(ctx, tx, m); err != nil {
			return err
		}
		return boom
	}, worker.Message[credit]{Payload: credit{"o-1", 500}})
	if !errors.Is(run.Err, boom) {
		t.Fatalf("Err = %v, want boom", run.Err)
	}
	if run.Result != nil {
		t.Errorf("Result = %s after a failure, want nil", run.Result)
	}
	if n := count(t, run.Tx, "SELECT count(*) FROM credits WHERE order_id = 'o-1'"); n != 0 {
		t.Fatal("the failed handler's write was kept")
	}
	if n := count(t, run.Tx, "SELECT count(*) FROM credits WHERE order_id = 'before'"); n != 1 {
		t.Fatal("the handler's failure rolled back what came before it in the transaction")
	}
}

// A handler that ignores a failed statement and returns nil fails, as it does in a pool.
func TestRunHandlerIgnoredFailedStatementIsAFailure(t *testing.T) {
	db := withCredits(t)
	run := txinboxtest.RunHandler(t, db.Pool, func(ctx context.Context, tx pgx.Tx, _ *worker.Message[credit]) error {
		_, _ = tx.Exec(ctx, "INSERT INTO no_such_table VALUES (1)")
		return nil
	}, worker.Message[credit]{})
	if run.Err == nil {
		t.Fatal("Err = nil for a handler that left its transaction aborted")
	}
	if n := count(t, run.Tx, "SELECT count(*) FROM credits"); n != 0 {
		t.Fatal("the test transaction is not usable after the failed handler")
	}
}

// The handler's transaction refuses Commit and Rollback; SetResult reaches Run.Result; zero message
// fields get defaults and the payload arrives decoded from its JSON.
func TestRunHandlerMessageAndTx(t *testing.T) {
	db := withCredits(t)
	var got *worker.Message[credit]
	run := txinboxtest.RunHandler(t, db.Pool, func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		got = m
		if err := tx.Commit(ctx); !errors.Is(err, txinbox.ErrTxManaged) {
			t.Errorf("Commit = %v, want ErrTxManaged", err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, txinbox.ErrTxManaged) {
			t.Errorf("Rollback = %v, want ErrTxManaged", err)
		}
		return m.SetResult(map[string]int64{"credited": m.Payload.Cents})
	}, worker.Message[credit]{RawPayload: []byte(`{"order_id": "o-9", "cents": 42, "extra": true}`), OrderingKey: "o-9"})
	if run.Err != nil {
		t.Fatal(run.Err)
	}
	if string(run.Result) != `{"credited":42}` {
		t.Errorf("Result = %s", run.Result)
	}
	if got.Payload != (credit{"o-9", 42}) || got.Consumer != "txinboxtest" || got.Kind != "test" || got.Attempt != 1 ||
		len(got.Key) < len("txinboxtest-") || got.OrderingKey != "o-9" || time.Since(got.ReceivedAt) > time.Hour {
		t.Errorf("message = %+v", got)
	}
}

// A payload that does not decode into the handler's type is a permanent error and the handler does
// not run, as in a pool.
func TestRunHandlerUndecodablePayloadIsPermanent(t *testing.T) {
	db := withCredits(t)
	run := txinboxtest.RunHandler(t, db.Pool, func(context.Context, pgx.Tx, *worker.Message[credit]) error {
		t.Error("the handler ran on an undecodable payload")
		return nil
	}, worker.Message[credit]{RawPayload: []byte(`{"cents": "many"}`)})
	if !txinbox.IsPermanent(run.Err) {
		t.Fatalf("Err = %v, want a permanent error", run.Err)
	}
}
