// Package txtest holds what the tests of the managed transactions (worker's handler transaction,
// idempotency's request transaction) share: a writer for every method of pgx.Tx, the record of the
// large objects they create, and the check of those large objects afterwards.
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package txtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Writer writes the effect named key through one method of tx: a row of the effects table of schema,
// or, for LargeObjects, a large object recorded in lo.
type Writer func(ctx context.Context, tx pgx.Tx, schema, key string, lo *LargeObjects) error

// Table is the effects table the writers insert into.
type Table struct {
	// Insert returns the statement inserting one effect into schema's effects table; its only
	// parameter, $1, is the effect's key.
	Insert func(schema string) string
	// CopyColumns are the columns CopyFrom fills, and CopyRow the row it writes for key.
	CopyColumns []string
	CopyRow     func(key string) []any
}

// Methods returns a writer for each method of pgx.Tx, keyed by its name. Each writes through its
// method first, before any other. Commit and Rollback write with Exec and then call their method,
// which must return an error matching refused (the transaction is managed by its owner) and change
// nothing.
func Methods(table Table, refused error) map[string]Writer {
	ins := table.Insert
	end := func(name string, end func(pgx.Tx, context.Context) error) Writer {
		return func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			if _, err := tx.Exec(ctx, ins(schema), key); err != nil {
				return err
			}
			if err := end(tx, ctx); !errors.Is(err, refused) {
				return fmt.Errorf("%s returned %v, want %v", name, err, refused)
			}
			return nil
		}
	}
	return map[string]Writer{
		"Exec": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			_, err := tx.Exec(ctx, ins(schema), key)
			return err
		},
		"Query": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			rows, err := tx.Query(ctx, ins(schema)+" RETURNING key", key)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		},
		"QueryRow": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			var got string
			return tx.QueryRow(ctx, ins(schema)+" RETURNING key", key).Scan(&got)
		},
		"SendBatch": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			b := &pgx.Batch{}
			b.Queue(ins(schema), key)
			return tx.SendBatch(ctx, b).Close()
		},
		"CopyFrom": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{schema, "effects"}, table.CopyColumns,
				pgx.CopyFromRows([][]any{table.CopyRow(key)}))
			return err
		},
		"Prepare": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			name := "txmethods_" + strings.ReplaceAll(key, "/", "_")
			if _, err := tx.Prepare(ctx, name, ins(schema)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, name, key)
			return err
		},
		"Conn": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			_, err := tx.Conn().Exec(ctx, ins(schema), key)
			return err
		},
		"Begin": func(ctx context.Context, tx pgx.Tx, schema, key string, _ *LargeObjects) error {
			nested, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := nested.Exec(ctx, ins(schema), key); err != nil {
				return err
			}
			return nested.Commit(ctx)
		},
		"LargeObjects": func(ctx context.Context, tx pgx.Tx, _, key string, lo *LargeObjects) error {
			los := tx.LargeObjects()
			oid, err := los.Create(ctx, 0)
			if err != nil {
				return err
			}
			lo.add(key, oid)
			obj, err := los.Open(ctx, oid, pgx.LargeObjectModeWrite)
			if err != nil {
				return err
			}
			if _, err := obj.Write([]byte(key)); err != nil {
				return err
			}
			return obj.Close()
		},
		"Commit":   end("Commit", pgx.Tx.Commit),
		"Rollback": end("Rollback", pgx.Tx.Rollback),
	}
}

// Names returns the names of methods, sorted.
func Names(methods map[string]Writer) []string {
	names := make([]string, 0, len(methods))
	for name := range methods {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// LargeObjects records the large objects the LargeObjects writer created, by effect key. Its zero
// value is ready; it may be used by concurrent writers.
type LargeObjects struct {
	mu  sync.Mutex
	oid map[string]uint32
}

func (l *LargeObjects) add(key string, oid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.oid == nil {
		l.oid = map[string]uint32{}
	}
	l.oid[key] = oid
}

// Check fails t unless the large object written for key exists with key as its content when kept,
// and does not exist otherwise. It unlinks a kept one.
func (l *LargeObjects) Check(t *testing.T, db *pgxpool.Pool, key string, kept bool) {
	t.Helper()
	l.mu.Lock()
	oid, ok := l.oid[key]
	l.mu.Unlock()
	if !ok {
		t.Errorf("%s: no large object was created", key)
		return
	}
	var content []byte
	err := db.QueryRow(context.Background(), `SELECT lo_get($1)`, oid).Scan(&content)
	switch {
	case kept && err != nil:
		t.Errorf("%s: large object %d, whose writes were to be kept: %v", key, oid, err)
	case kept && string(content) != key:
		t.Errorf("%s: large object %d holds %q", key, oid, content)
	case !kept && err == nil:
		t.Errorf("%s: large object %d, whose writes were to be rolled back, survives", key, oid)
	}
	if kept {
		_, _ = db.Exec(context.Background(), `SELECT lo_unlink($1)`, oid)
	}
}
