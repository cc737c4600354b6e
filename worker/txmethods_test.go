package worker_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/txtest"
	"github.com/txinbox/txinbox/worker"
)

// txMethods lists every method of pgx.Tx the handler's transaction covers, each with a writer that
// uses it first, before any other method. TestHandlerTxCoversEveryMethod checks that the list is
// complete; TestHandlerTxEveryMethod checks that each one's writes are rolled back with a failed
// message and kept exactly once with a completed one.
var txMethods = txtest.Methods(txtest.Table{
	Insert:      insertEffect,
	CopyColumns: []string{"key", "amount"},
	CopyRow:     func(key string) []any { return []any{key, int64(1)} },
}, txinbox.ErrTxManaged)

func insertEffect(schema string) string {
	return "INSERT INTO " + pgx.Identifier{schema, "effects"}.Sanitize() + " (key, amount) VALUES ($1, 1)"
}

// A method pgx adds to pgx.Tx later must not reach the connection past the message's savepoint
// unnoticed: every method of the interface must be in txMethods, with its behaviour tested.
func TestHandlerTxCoversEveryMethod(t *testing.T) {
	it := reflect.TypeOf((*pgx.Tx)(nil)).Elem()
	for i := range it.NumMethod() {
		name := it.Method(i).Name
		if _, ok := txMethods[name]; !ok {
			t.Errorf("pgx.Tx has method %s, which the handler's transaction does not cover: implement it on handlerTx "+
				"in worker/tx.go (establishing the message's savepoint before it sends anything, or refusing it), "+
				"and add a writer for it to txtest.Methods in txinboxtest/txtest/txtest.go", name)
		}
		if _, ok := txFailures[name]; !ok && name != "Commit" && name != "Rollback" {
			t.Errorf("pgx.Tx has method %s, with no case in txFailures (worker/txmethods_test.go): add one that makes "+
				"a statement fail through it, and make handlerTx note such failures (or mark them unobserved)", name)
		}
	}
	for name := range txMethods {
		if _, ok := it.MethodByName(name); !ok {
			t.Errorf("txMethods lists %s, which pgx.Tx does not have", name)
		}
	}
}

// A handler that writes through tx.Conn() and then fails: the message is dead and its write is rolled
// back, while a batch-mate's write commits with its completion.
func TestHandlerConnWriteRolledBackWithFailedMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "a-before", "b-conn-fails", "c-after")
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if m.Key != "b-conn-fails" {
			return applyCredit(ctx, tx, e.Schema, m)
		}
		if _, err := tx.Conn().Exec(ctx, insertEffect(e.Schema), m.Key); err != nil {
			return err
		}
		return txinbox.Permanent(errors.New("rejected after writing through Conn"))
	}, worker.HandlerConfig{MaxAttempts: 1})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1 }))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })

	for k, w := range map[string]string{"a-before": "completed", "b-conn-fails": "dead", "c-after": "completed"} {
		if s, _, _, le := e.state(t, k); s != w {
			t.Errorf("%s: %s (%s), want %s", k, s, le, w)
		}
	}
	if got := effectKeys(t, e); got != "a-before,c-after" {
		t.Errorf("effects: %s, want a-before,c-after (the dead message's write through Conn must be rolled back)", got)
	}
}

// Every method of the handler's transaction, used first in its message: the writes of a failed
// message are all rolled back, those of a completed one all kept, exactly once. One message also
// writes through every method in turn. All messages run in one batch, failures between successes.
func TestHandlerTxEveryMethod(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := txtest.Names(txMethods)
	var msgs []string
	for _, name := range names {
		msgs = append(msgs, "ok-"+name, "fail-"+name)
	}
	msgs = append(msgs, "ok-all", "fail-all")
	e.receive(t, msgs...)

	lo := &txtest.LargeObjects{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		outcome, method, _ := strings.Cut(m.Key, "-")
		use := []string{method}
		if method == "all" {
			use = names
		}
		for _, name := range use {
			if err := txMethods[name](ctx, tx, e.Schema, m.Key+"/"+name, lo); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		if outcome == "fail" {
			return txinbox.Permanent(errors.New("rejected after writing"))
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 1})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1 }))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })

	for _, k := range msgs {
		want := "completed"
		if strings.HasPrefix(k, "fail-") {
			want = "dead"
		}
		if s, _, _, le := e.state(t, k); s != want {
			t.Errorf("%s: %s (%s), want %s", k, s, le, want)
		}
	}
	for _, k := range msgs {
		outcome, method, _ := strings.Cut(k, "-")
		use := []string{method}
		if method == "all" {
			use = names
		}
		for _, name := range use {
			key := k + "/" + name
			kept := outcome == "ok"
			if name == "LargeObjects" {
				lo.Check(t, e.Pool, key, kept)
				continue
			}
			n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = $1`, key)
			if kept && n != 1 {
				t.Errorf("%s: %d effects, want exactly 1 (completed message)", key, n)
			}
			if !kept && n != 0 {
				t.Errorf("%s: %d effects survive the failed message, want 0", key, n)
			}
		}
	}
}

func effectKeys(t *testing.T, e *env) string {
	t.Helper()
	rows, err := e.Pool.Query(context.Background(), e.SQL(`SELECT key FROM {schema}.effects ORDER BY key`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, ",")
}

// txFailures makes a statement fail through one method of the handler's transaction, leaving the
// transaction aborted, and ignores the error (as a careless handler would).
var txFailures = map[string]func(ctx context.Context, tx pgx.Tx, schema string){
	"Exec": func(ctx context.Context, tx pgx.Tx, schema string) {
		_, _ = tx.Exec(ctx, insertEffect(schema), "a-ok")
	},
	"Query": func(ctx context.Context, tx pgx.Tx, schema string) {
		if rows, err := tx.Query(ctx, insertEffect(schema)+" RETURNING key", "a-ok"); err == nil {
			rows.Close()
		}
	},
	"QueryRow": func(ctx context.Context, tx pgx.Tx, schema string) {
		var s string
		_ = tx.QueryRow(ctx, insertEffect(schema)+" RETURNING key", "a-ok").Scan(&s)
	},
	"SendBatch": func(ctx context.Context, tx pgx.Tx, schema string) {
		b := &pgx.Batch{}
		b.Queue(insertEffect(schema), "a-ok")
		_ = tx.SendBatch(ctx, b).Close()
	},
	"CopyFrom": func(ctx context.Context, tx pgx.Tx, schema string) {
		_, _ = tx.CopyFrom(ctx, pgx.Identifier{schema, "effects"}, []string{"key", "amount"}, pgx.CopyFromRows([][]any{{"a-ok", int64(1)}}))
	},
	"Prepare": func(ctx context.Context, tx pgx.Tx, schema string) {
		_, _ = tx.Prepare(ctx, "txmethods_bad", "SELECT * FROM "+pgx.Identifier{schema, "no_such_table"}.Sanitize())
	},
	"Conn": func(ctx context.Context, tx pgx.Tx, schema string) {
		_, _ = tx.Conn().Exec(ctx, insertEffect(schema), "a-ok")
	},
	"Begin": func(ctx context.Context, tx pgx.Tx, schema string) {
		if nested, err := tx.Begin(ctx); err == nil {
			_, _ = nested.Exec(ctx, insertEffect(schema), "a-ok") // and no nested.Rollback
		}
	},
	"LargeObjects": func(ctx context.Context, tx pgx.Tx, _ string) {
		los := tx.LargeObjects()
		_, _ = los.Open(ctx, 1, pgx.LargeObjectModeRead) // no large object has oid 1
	},
}

// A handler that leaves its transaction aborted through any method, ignores the error and returns
// nil, as the last message of its batch: the message fails ("left aborted") and its batch-mate
// completes. (The worker must see the failure whichever method sent the statement; unseen, the
// batch's commit failed with no culprit and the batch was handed back and run again forever.)
func TestHandlerTxIgnoredFailureEveryMethod(t *testing.T) {
	for name, fail := range txFailures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.receive(t, "a-ok", "z-fails")
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
				if m.Key == "z-fails" {
					fail(ctx, tx, e.Schema)
					return nil
				}
				return applyCredit(ctx, tx, e.Schema, m)
			}, worker.HandlerConfig{MaxAttempts: 1})
			run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1 }))
			waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })
			if s, _, _, le := e.state(t, "a-ok"); s != "completed" {
				t.Errorf("a-ok: %s (%s), want completed", s, le)
			}
			if s, _, _, le := e.state(t, "z-fails"); s != "dead" || !strings.Contains(le, "left aborted") {
				t.Errorf("z-fails: %s (%s), want dead, left aborted", s, le)
			}
			if got := effectKeys(t, e); got != "a-ok" {
				t.Errorf("effects: %s, want a-ok", got)
			}
		})
	}
}

// Every method of the handler's transaction, used first in its message after the handler's deadline
// has passed: the attempt fails as the handler's timeout (MaxAttempts 1: dead), and its batch-mates
// complete in the same batch. (A statement whose context had ended before the message's savepoint
// went out was taken for a lost connection: the batch rolled back uncharged and ran again forever.)
func TestHandlerTxEveryMethodAfterDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := txtest.Names(txMethods)
	msgs := []string{"ok-first"}
	for _, name := range names {
		msgs = append(msgs, "late-"+name, "ok-after-"+name)
	}
	e.receive(t, msgs...)

	lo := &txtest.LargeObjects{}
	var lateCalls atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		name, late := strings.CutPrefix(m.Key, "late-")
		if !late {
			return applyCredit(ctx, tx, e.Schema, m)
		}
		lateCalls.Add(1)
		<-ctx.Done()
		return txMethods[name](ctx, tx, e.Schema, m.Key, lo)
	}, worker.HandlerConfig{MaxAttempts: 1, Timeout: 100 * time.Millisecond})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1 }))
	waitFor(t, "settled", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 || lateCalls.Load() > int64(len(names))
	})
	if n := lateCalls.Load(); n != int64(len(names)) {
		t.Fatalf("%d calls of the %d late messages, want one each: a late statement broke its batch, run again", n, len(names))
	}
	for _, k := range msgs {
		s, started, _, le := e.state(t, k)
		switch {
		case strings.HasPrefix(k, "late-") && (s != "dead" || !strings.Contains(le, "timed out after 100ms")):
			t.Errorf("%s: %s (%s), want dead, timed out", k, s, le)
		case strings.HasPrefix(k, "ok-") && (s != "completed" || started != 1):
			t.Errorf("%s: %s after %d attempts (%s), want completed in one", k, s, started, le)
		}
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key LIKE 'late-%'`); n != 0 {
		t.Errorf("%d effects of late statements", n)
	}
}
