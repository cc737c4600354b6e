// Package schemasql runs the sqlc queries of internal/sqlc against a configurable schema.
//
// Every table name in queries/ is written as `/* TEMPLATE: schema */inbox`. A Schema wraps any
// sqlc.DBTX so that each statement has that marker replaced by the quoted schema name before it is
// sent. The rewritten text is cached, so prepared-statement caching in pgx still works (one cache
// entry per schema and query).
package schemasql

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox/internal/base"
	"github.com/txinbox/txinbox/internal/sqlc"
)

const marker = "/* TEMPLATE: schema */"

// Queries is the stateless sqlc query set; every method takes the DBTX to run on.
var Queries = sqlc.New()

// Schema rewrites queries for one schema.
type Schema struct {
	prefix string
	cache  sync.Map // original SQL -> rewritten SQL
}

// New returns a Schema for schema. The schema must already be validated by the caller; it is quoted
// with pgx.Identifier here, so no value ever reaches the SQL text unquoted.
func New(schema string) *Schema {
	return &Schema{prefix: pgx.Identifier{schema}.Sanitize() + "."}
}

// SQL returns sql with the schema marker replaced.
func (s *Schema) SQL(sql string) string {
	if v, ok := s.cache.Load(sql); ok {
		return v.(string)
	}
	out := strings.ReplaceAll(sql, marker, s.prefix)
	s.cache.Store(sql, out)
	return out
}

// Table returns the quoted, schema-qualified name of table.
func (s *Schema) Table(table string) string { return s.prefix + pgx.Identifier{table}.Sanitize() }

// Wrap returns db with every statement rewritten for the schema.
func (s *Schema) Wrap(db sqlc.DBTX) sqlc.DBTX { return wrapped{db: db, s: s} }

type wrapped struct {
	db sqlc.DBTX
	s  *Schema
}

func (w wrapped) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return w.db.Exec(ctx, w.s.SQL(sql), args...)
}

func (w wrapped) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return w.db.Query(ctx, w.s.SQL(sql), args...)
}

func (w wrapped) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return w.db.QueryRow(ctx, w.s.SQL(sql), args...)
}

// Err wraps an error of a statement as txinbox's packages return it: an undefined table (42P01)
// matches txinbox.ErrNotMigrated; a named prepared statement that already exists (42P05) or does not
// (26000), which txinbox's statements meet only when pgx's statement cache runs through a pooler in
// transaction mode, matches txinbox.ErrPooler and says what to set; every error is prefixed with
// "txinbox: ".
func Err(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01":
			return fmt.Errorf("%w: %w", base.ErrNotMigrated, err)
		case "42P05", "26000":
			return fmt.Errorf("%w: %w", ErrPoolerStatements, err)
		}
	}
	return fmt.Errorf("txinbox: %w", err)
}

// ErrPoolerStatements is the error of statements whose named prepared statements a pooler in
// transaction mode does not keep: it matches txinbox.ErrPooler and says what to set.
var ErrPoolerStatements = fmt.Errorf("%w: it does not keep pgx's named prepared statements per connection, "+
	"which pgx's default query exec mode (cache_statement) needs: set default_query_exec_mode=exec in the connection string "+
	"(or cache_describe, or simple_protocol; in Go: ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec), "+
	"or use PgBouncer 1.21 or later with max_prepared_statements above 0",
	base.ErrPooler)

// Consumers lists, in text order, the consumers that have messages stored in the inbox table of the
// schema db is wrapped for (Wrap): one NextConsumer statement per consumer, each one descent of the
// unique key, so the cost does not grow with the rows stored. Statements that lock or delete rows
// run once per consumer, so that each names its consumer (SCALING.md: a table distributed by
// consumer runs such a statement on one shard only).
func Consumers(ctx context.Context, db sqlc.DBTX) ([]string, error) {
	return ConsumersUpTo(ctx, db, 0)
}

// ConsumersUpTo is Consumers, stopping after the first limit consumers when limit is above 0. It is how
// Admin.Overview lists them: a recursive CTE would walk the unique key in one statement on one
// server, but Citus refuses a recursive CTE on a distributed table ("recursive CTEs are only
// supported when they contain a filter on the distribution column").
func ConsumersUpTo(ctx context.Context, db sqlc.DBTX, limit int) ([]string, error) {
	var out []string
	after := ""
	for limit <= 0 || len(out) < limit {
		next, err := Queries.NextConsumer(ctx, db, after)
		if err != nil {
			return out, err
		}
		if next == "" {
			return out, nil
		}
		out = append(out, next)
		after = next
	}
	return out, nil
}

// OutboxChannel returns the channel on which outbox Clients of schema wake the relays of that schema
// (with an empty payload): "txinbox_outbox_" followed by the schema name, or, when that would exceed
// the 63 bytes PostgreSQL allows a channel name, "txinbox_outbox_" followed by 16 hex digits of a
// hash of it. An empty schema means the default one (txinbox.DefaultSchema). It is not the inbox's
// channel (Store.NotifyChannel): worker pools are not woken by events.
func OutboxChannel(schema string) string { return base.Channel("txinbox_outbox_", schema) }

// OutboxClaimLockKey returns the key of the advisory lock that serialises the claims of the relays
// of schema (OutboxClaimLock), which a resume of a topic takes too (ResumeTopic).
func OutboxClaimLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("txinbox.outbox.claim\x00" + schema))
	return int64(h.Sum64() >> 1)
}
