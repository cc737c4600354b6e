package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// The handler's transaction: savepoints are established lazily and pipelined with the first
// statement. These cases pin down what a handler can do with it, all in one batch.
func TestHandlerTransactionBehaviour(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "a-exec", "b-ignores-error", "c-recovers", "d-query", "e-no-db", "f-commit", "g-noargs", "h-fails-after-write")
	table := pgx.Identifier{e.Schema, "effects"}.Sanitize()
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		switch m.Key {
		case "b-ignores-error":
			_ = applyCredit(ctx, tx, e.Schema, m)
			_, _ = tx.Exec(ctx, "INSERT INTO "+table+" (key, amount) VALUES ($1, 1)", "a-exec") // duplicate key: fails
			return nil                                                                          // ... and the handler pretends all is well
		case "c-recovers":
			nested, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := nested.Exec(ctx, "INSERT INTO "+table+" (key, amount) VALUES ($1, 1)", "a-exec"); err == nil {
				return errors.New("expected a duplicate key error")
			}
			if err := nested.Rollback(ctx); err != nil {
				return err
			}
			return applyCredit(ctx, tx, e.Schema, m)
		case "d-query":
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE key = $1", "a-exec").Scan(&n); err != nil || n != 1 {
				return errors.New("a-exec not visible in the batch")
			}
			rows, err := tx.Query(ctx, "SELECT key FROM "+table+" WHERE key = ANY($1)", []string{"a-exec", "c-recovers"})
			if err != nil {
				return err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(got) != 2 {
				return errors.New("query rows: " + strings.Join(got, ","))
			}
			return applyCredit(ctx, tx, e.Schema, m)
		case "e-no-db":
			return nil
		case "f-commit":
			if err := tx.Commit(ctx); !errors.Is(err, txinbox.ErrTxManaged) {
				return errors.New("Commit was not refused")
			}
			if err := tx.Rollback(ctx); !errors.Is(err, txinbox.ErrTxManaged) {
				return errors.New("Rollback was not refused")
			}
			return applyCredit(ctx, tx, e.Schema, m)
		case "g-noargs":
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (key, amount) VALUES ('g-noargs', 1); INSERT INTO "+table+" (key, amount) VALUES ('g-second', 1)")
			return err
		case "h-fails-after-write":
			if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
				return err
			}
			return txinbox.Permanent(errors.New("rejected"))
		}
		return applyCredit(ctx, tx, e.Schema, m)
	}, worker.HandlerConfig{MaxAttempts: 1})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })

	want := map[string]string{"a-exec": "completed", "b-ignores-error": "dead", "c-recovers": "completed",
		"d-query": "completed", "e-no-db": "completed", "f-commit": "completed", "g-noargs": "completed", "h-fails-after-write": "dead"}
	for k, w := range want {
		if s, _, _, le := e.state(t, k); s != w {
			t.Errorf("%s: %s (%s), want %s", k, s, le, w)
		}
	}
	if _, _, _, le := e.state(t, "b-ignores-error"); !strings.Contains(le, "left aborted") {
		t.Errorf("b-ignores-error: last error %q", le)
	}
	rows, _ := e.Pool.Query(context.Background(), e.SQL(`SELECT key FROM {schema}.effects ORDER BY key`))
	got, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	if strings.Join(got, ",") != "a-exec,c-recovers,d-query,f-commit,g-noargs,g-second" {
		t.Errorf("effects: %v", got)
	}
}
