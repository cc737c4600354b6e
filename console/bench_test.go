package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/console"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// benchSchema is the scratch schema of BenchmarkConsolePages: kept between runs (seeding 10M rows
// takes minutes) and seeded again when its row count is not the one asked for.
const benchSchema = "txinbox_console_bench"

// BenchmarkConsolePages times each page of the console, rendered by the handler (queries and
// template), on a schema holding TXINBOX_BENCH_ROWS retained messages (default 100000): 99% completed,
// 0.5% dead, 0.5% pending, over 10 consumers, and two days of rollup. The README's figures:
//
//	TXINBOX_BENCH_ROWS=10000000 go test -run '^$' -bench ConsolePages -benchtime 20x ./console/
//
// Drop the schema afterwards: DROP SCHEMA txinbox_console_bench CASCADE.
func BenchmarkConsolePages(b *testing.B) {
	rows := int64(100_000)
	if v := os.Getenv("TXINBOX_BENCH_ROWS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1000 {
			b.Fatalf("TXINBOX_BENCH_ROWS=%q: want a number of at least 1000", v)
		}
		rows = n
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	seedBench(b, pool, cfg, rows)
	h, err := console.New(txinbox.Store{DB: pool, Schema: benchSchema, Logger: slog.New(slog.DiscardHandler)}, console.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var deadID int64
	if err := pool.QueryRow(ctx, `SELECT max(id) FROM `+pgx.Identifier{benchSchema, "inbox_dead"}.Sanitize()).Scan(&deadID); err != nil {
		b.Fatal(err)
	}
	mid := rows / 2
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"lookup_by_key", fmt.Sprintf("/message?consumer=consumer-%d&key=", mid%10) + url.QueryEscape(fmt.Sprintf("key-%d", mid))},
		{"lookup_by_id", fmt.Sprintf("/message?id=%d", mid)},
		{"dead_list", "/dead"},
		{"dead_list_consumer", "/dead?consumer=consumer-7"},
		{"dead_list_error_text", "/dead?error=" + url.QueryEscape("TIMEOUT")},
		{"dead_list_older_page", fmt.Sprintf("/dead?before=%d", deadID/2)},
		{"dead_confirm_all", "/dead/confirm?op=discard&scope=filter&kind=Invoice"},
		{"pending_confirm", "/pending/confirm?consumer=consumer-1"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", p.path, rec.Code, rec.Body)
				}
			}
		})
	}
}

func seedBench(b *testing.B, pool *pgxpool.Pool, cfg *pgxpool.Config, rows int64) {
	b.Helper()
	ctx := context.Background()
	s := pgx.Identifier{benchSchema}.Sanitize()
	var have int64
	err := pool.QueryRow(ctx, `SELECT coalesce((SELECT reltuples::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'inbox'), -1)`, benchSchema).Scan(&have)
	if err != nil {
		b.Fatal(err)
	}
	if have >= rows*99/100 && have <= rows*101/100 {
		return // seeded before (reltuples is an estimate)
	}
	b.Logf("seeding %d messages into %s (once; kept for the next runs)", rows, benchSchema)
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s+` CASCADE`); err != nil {
		b.Fatal(err)
	}
	if err := migrate.Up(ctx, txinbox.Store{DB: pool, Schema: benchSchema}); err != nil {
		b.Fatal(err)
	}
	// One statement: ids 1..rows over 10 consumers; 0.5% dead, 0.5% pending, the rest completed. Dead rows fill inbox_dead through the trigger, as a worker's update would.
	stmts := []string{
		`INSERT INTO ` + s + `.inbox (consumer, key, kind, payload, headers, fingerprint, state, attempts_started, attempts_failed,
			last_error, received_at, started_at, completed_at, expires_at, result)
		SELECT 'consumer-' || (g % 10), 'key-' || g, CASE WHEN g % 3 = 0 THEN 'Refund' ELSE 'Invoice' END,
			jsonb_build_object('order', g, 'amount', g % 1000, 'currency', 'EUR'), '{"source": "bench"}',
			sha256(g::text::bytea),
			CASE WHEN (g / 10) % 200 = 0 THEN 'dead' WHEN (g / 10) % 200 = 100 THEN 'pending' ELSE 'completed' END,
			CASE WHEN (g / 10) % 200 = 100 THEN 0 WHEN (g / 10) % 200 = 0 THEN 5 ELSE 1 END,
			CASE WHEN (g / 10) % 200 = 0 THEN 5 ELSE 0 END,
			CASE WHEN (g / 10) % 200 = 0 THEN CASE WHEN (g / 10) % 400 = 0 THEN 'timeout calling bank' ELSE 'card declined' END END,
			now() - make_interval(secs => ($1::bigint - g) * 0.05), now() - make_interval(secs => ($1::bigint - g) * 0.05),
			CASE WHEN (g / 10) % 200 <> 100 THEN now() - make_interval(secs => ($1::bigint - g) * 0.05) END,
			CASE WHEN (g / 10) % 200 NOT IN (0, 100) THEN now() + interval '7 days' END,
			CASE WHEN (g / 10) % 200 NOT IN (0, 100) THEN '{"ok": true}'::jsonb END
		FROM generate_series(1, $1::bigint) g`,
		`INSERT INTO ` + s + `.inbox_queue (id, consumer, run_at) SELECT id, consumer, received_at FROM ` + s + `.inbox WHERE state = 'pending' ORDER BY id`,
		`INSERT INTO ` + s + `.inbox_rollup (consumer, minute, completed, failed, dead)
		SELECT 'consumer-' || c, date_trunc('minute', now()) - make_interval(mins => m), 100 + (m * 7 + c) % 50, (m + c) % 5, (m + c) % 5 / 4
		FROM generate_series(0, 9) c, generate_series(0, 2 * 24 * 60 - 1) m`,
	}
	for i, q := range stmts {
		var err error
		if i == 0 {
			_, err = pool.Exec(ctx, q, rows)
		} else {
			_, err = pool.Exec(ctx, q)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, t := range []string{"inbox", "inbox_queue", "inbox_dead", "inbox_rollup"} {
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s+`.`+pgx.Identifier{t}.Sanitize()); err != nil {
			b.Fatal(err)
		}
	}
}
