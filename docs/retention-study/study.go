//go:build retentionstudy

// Command study runs the prototypes of docs/retention-design.md against a scratch database.
//
//	cd docs/retention-study
//	nice -n 10 go run -tags retentionstudy . -db postgres://postgres@127.0.0.1:5432/retention_study <mode>
//
// Modes: setup, rrdemo, iso, bench, rotcost, sizes. Every mode but setup expects setup to have run
// (bench, rotcost and sizes run setup themselves, so that each starts from empty tables).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var dbURL = flag.String("db", "postgres://postgres@127.0.0.1:5432/retention_study", "scratch database")

const consumer = "c1"

// ---- receive statements -------------------------------------------------------------------------
// All four take $1 consumer, $2 keys, $3 kinds, $4 payloads and return (retry, ord, inserted, id,
// state, same_fingerprint, expired). They are ReceiveBatch (queries/receive.sql) without the
// in-batch repeat handling, ordering keys, headers, not-before and notifications, the same cut for
// every design.

const input = `
input AS (
    SELECT s.ord, s.key, s.kind, s.payload::jsonb AS payload
    FROM ROWS FROM (unnest($2::text[]), unnest($3::text[]), unnest($4::text[])) WITH ORDINALITY AS s(key, kind, payload, ord)
), f AS (
    SELECT input.*, sha256(convert_to(input.kind || E'\n' || input.payload::text, 'UTF8')) AS fp FROM input
)`

// t: the flat layout of migrations 00001–00005.
const recvT = `WITH ` + input + `, numbered AS (
    SELECT f.*, nextval('t.inbox_id_seq') AS id FROM f ORDER BY f.ord
), inserted AS (
    INSERT INTO t.inbox (id, consumer, key, kind, payload, fingerprint) OVERRIDING SYSTEM VALUE
    SELECT n.id, $1, n.key, n.kind, n.payload, n.fp FROM numbered n ORDER BY n.key
    ON CONFLICT (consumer, key) DO NOTHING
    RETURNING id, key, next_run_at
), queued AS (
    INSERT INTO t.inbox_queue (id, consumer, run_at) SELECT i.id, $1, i.next_run_at FROM inserted i
)
SELECT false AS retry, f.ord, (i.id IS NOT NULL) AS inserted, coalesce(i.id, m.id, 0) AS id, coalesce(m.state, '') AS state,
       coalesce(m.fingerprint = f.fp, false) AS same, coalesce(m.expires_at < now(), false) AS expired
FROM f
LEFT JOIN inserted i ON i.key = f.key
LEFT JOIN t.inbox m ON i.id IS NULL AND m.consumer = $1 AND m.key = f.key
ORDER BY f.ord`

// k: the key goes into the narrow keys table first (the flat layout's ON CONFLICT), the body into the current
// slot, read without a lock (it only places the row).
const recvK = `WITH ` + input + `, cur AS (
    SELECT (gen % 3)::smallint AS slot FROM k.inbox_gen WHERE consumer = $1
), numbered AS (
    SELECT f.*, nextval('k.inbox_id_seq') AS id FROM f ORDER BY f.ord
), keyed AS (
    INSERT INTO k.inbox_keys (consumer, key, id)
    SELECT $1, n.key, n.id FROM numbered n ORDER BY n.key
    ON CONFLICT (consumer, key) DO NOTHING
    RETURNING id
), inserted AS (
    INSERT INTO k.inbox (slot, id, consumer, key, kind, payload, fingerprint)
    SELECT cur.slot, n.id, $1, n.key, n.kind, n.payload, n.fp FROM numbered n JOIN keyed USING (id) CROSS JOIN cur
    RETURNING id, key, next_run_at
), queued AS (
    INSERT INTO k.inbox_queue (id, consumer, run_at) SELECT i.id, $1, i.next_run_at FROM inserted i
)
SELECT false AS retry, f.ord, (i.id IS NOT NULL) AS inserted, coalesce(i.id, kk.id, 0) AS id, coalesce(m.state, '') AS state,
       coalesce(m.fingerprint = f.fp, false) AS same, coalesce(m.expires_at < now(), false) AS expired
FROM f
LEFT JOIN inserted i ON i.key = f.key
LEFT JOIN k.inbox_keys kk ON i.id IS NULL AND kk.consumer = $1 AND kk.key = f.key
LEFT JOIN k.inbox m ON m.id = kk.id AND m.consumer = $1
ORDER BY f.ord`

// g: the generation row is locked FOR KEY SHARE and compared with the snapshot's; if they differ the
// statement's snapshot predates the last rotation: nothing is done and retry is returned (READ
// COMMITTED: run the statement again; REPEATABLE READ raises 40001 on the lock itself). Live rows of
// the other slots are looked for under the snapshot; the current slot's unique key does the rest.
const recvGHead = `WITH gl AS (
    SELECT gen FROM %[1]s.inbox_gen WHERE consumer = $1 FOR KEY SHARE
), gs AS (
    SELECT gen FROM %[1]s.inbox_gen WHERE consumer = $1
), cur AS (
    SELECT (gl.gen %% 3)::smallint AS slot FROM gl JOIN gs ON gs.gen = gl.gen
), `

// p: the current slot read without a lock; run after pLock in the same transaction.
const recvPHead = `WITH cur AS (
    SELECT (gen %% 3)::smallint AS slot FROM %[1]s.inbox_gen WHERE consumer = $1
), `

var recvGBody = strings.TrimSpace(input) + `, live AS (
    SELECT DISTINCT m.key
    FROM f JOIN %[1]s.inbox m ON m.consumer = $1 AND m.key = f.key CROSS JOIN cur
    WHERE m.slot <> cur.slot AND NOT (m.state = 'completed' AND m.expires_at < now())
), numbered AS (
    SELECT f.*, nextval('%[1]s.inbox_id_seq') AS id FROM f
    WHERE EXISTS (SELECT 1 FROM cur) AND NOT EXISTS (SELECT 1 FROM live WHERE live.key = f.key)
    ORDER BY f.ord
), inserted AS (
    INSERT INTO %[1]s.inbox (slot, id, consumer, key, kind, payload, fingerprint)
    SELECT cur.slot, n.id, $1, n.key, n.kind, n.payload, n.fp FROM numbered n CROSS JOIN cur ORDER BY n.key
    ON CONFLICT (consumer, key, slot) DO NOTHING
    RETURNING id, key, next_run_at
), queued AS (
    INSERT INTO %[1]s.inbox_queue (id, consumer, run_at) SELECT i.id, $1, i.next_run_at FROM inserted i
)
SELECT NOT EXISTS (SELECT 1 FROM cur) AS retry, f.ord, (i.id IS NOT NULL) AS inserted, coalesce(i.id, m.id, 0) AS id,
       coalesce(m.state, '') AS state, coalesce(m.fingerprint = f.fp, false) AS same, coalesce(m.expires_at < now(), false) AS expired
FROM f
LEFT JOIN inserted i ON i.key = f.key
LEFT JOIN LATERAL (
    SELECT m.id, m.state, m.fingerprint, m.expires_at FROM %[1]s.inbox m
    WHERE i.id IS NULL AND m.consumer = $1 AND m.key = f.key
    ORDER BY (m.state = 'completed' AND m.expires_at < now()), m.id DESC LIMIT 1
) m ON true
ORDER BY f.ord`

var recvG = fmt.Sprintf(recvGHead+recvGBody, "g")
var recvP = fmt.Sprintf(recvPHead+recvGBody, "p")

// pLock takes the per-key advisory locks of p, in hash order (no deadlock between batches).
const pLock = `SELECT count(pg_advisory_xact_lock(s.h)) FROM (
    SELECT DISTINCT hashtextextended($1 || chr(1) || k, 0) AS h FROM unnest($2::text[]) AS k ORDER BY 1) s`

var designs = []string{"t", "k", "g", "p"}

type outcome struct {
	inserted bool
	id       int64
	retries  int
}

// receive runs one receive of keys for design d on q (a connection or a transaction). A G statement
// that returns retry is run again (READ COMMITTED only: under REPEATABLE READ the lock raises 40001).
func receive(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, d string, keys []string) ([]outcome, error) {
	kinds := make([]string, len(keys))
	payloads := make([]string, len(keys))
	for i, k := range keys {
		kinds[i] = "order.created"
		payloads[i] = `{"key":"` + k + `","amount":1234,"currency":"EUR","note":"retention study payload of a typical size"}`
	}
	var stmt string
	switch d {
	case "t":
		stmt = recvT
	case "k":
		stmt = recvK
	case "g":
		stmt = recvG
	case "p":
		stmt = recvP
		if _, err := q.Exec(ctx, pLock, consumer, keys); err != nil {
			return nil, err
		}
	}
	for retries := 0; ; retries++ {
		rows, err := q.Query(ctx, stmt, consumer, keys, kinds, payloads)
		if err != nil {
			return nil, err
		}
		out := make([]outcome, 0, len(keys))
		retry := false
		for rows.Next() {
			var r bool
			var ord, id int64
			var ins, same, exp bool
			var state string
			if err := rows.Scan(&r, &ord, &ins, &id, &state, &same, &exp); err != nil {
				rows.Close()
				return nil, err
			}
			retry = retry || r
			out = append(out, outcome{inserted: ins, id: id, retries: retries})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if !retry {
			return out, nil
		}
		if retries > 100 {
			return nil, errors.New("g: retried 100 times")
		}
	}
}

// ---- setup ---------------------------------------------------------------------------------------

var gooseUp = regexp.MustCompile(`(?s)-- \+goose Up(.*?)-- \+goose Down`)

func setup(ctx context.Context, pool *pgxpool.Pool) {
	must(exec(ctx, pool, `DROP SCHEMA IF EXISTS t, k, g, p CASCADE`))
	must(exec(ctx, pool, `CREATE SCHEMA t; CREATE SCHEMA k; CREATE SCHEMA g; CREATE SCHEMA p`))
	conn, err := pool.Acquire(ctx)
	must(err)
	defer conn.Release()
	must(exec(ctx, conn, `SET search_path = t`))
	for _, f := range []string{"00001_inbox.sql", "00003_console.sql", "00004_narrow_claims.sql", "00005_route_by_consumer.sql"} {
		b, err := os.ReadFile("../../migrations/" + f)
		must(err)
		up := gooseUp.FindStringSubmatch(string(b))[1]
		must(exec(ctx, conn, up))
	}
	common, err := os.ReadFile("schema.sql")
	must(err)
	for _, s := range []string{"k", "g", "p"} {
		must(exec(ctx, conn, `SET search_path = `+s))
		must(exec(ctx, conn, string(common)))
		extra := "schema_g.sql"
		if s == "k" {
			extra = "schema_k.sql"
		}
		b, err := os.ReadFile(extra)
		must(err)
		must(exec(ctx, conn, string(b)))
		must(exec(ctx, conn, `INSERT INTO inbox_gen VALUES ('c1', 0)`))
	}
	must(exec(ctx, conn, `RESET search_path`))
}

func rotate(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, d string) (int64, error) {
	if d == "t" {
		return 0, nil
	}
	var n int64
	err := db.QueryRow(ctx, `SELECT `+d+`.rotate()`).Scan(&n)
	return n, err
}

// ---- rrdemo: the deterministic interleaving across a rotation ------------------------------------

func rrdemo(ctx context.Context, pool *pgxpool.Pool) {
	for _, order := range []string{"s1,rotate", "rotate,s1"} {
		for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
			for _, d := range designs {
				key := fmt.Sprintf("demo-%s-%d", iso, time.Now().UnixNano())
				s2, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				must(err)
				must(exec(ctx, s2, `SELECT 1`)) // s2's snapshot (RR, SERIALIZABLE) is taken here
				var r1 []outcome
				if order == "s1,rotate" {
					r1, err = receive(ctx, pool, d, []string{key})
					must(err)
					_, err = rotate(ctx, pool, d)
					must(err)
				} else {
					_, err = rotate(ctx, pool, d)
					must(err)
					r1, err = receive(ctx, pool, d, []string{key})
					must(err)
				}
				r2, err := receive(ctx, s2, d, []string{key})
				res := ""
				if err != nil {
					res = "error " + sqlstate(err)
					_ = s2.Rollback(ctx)
				} else {
					if err := s2.Commit(ctx); err != nil {
						res = fmt.Sprintf("inserted=%v, commit error %s", r2[0].inserted, sqlstate(err))
					} else {
						res = fmt.Sprintf("inserted=%v id=%d retries=%d", r2[0].inserted, r2[0].id, r2[0].retries)
					}
				}
				var rows int
				must(pool.QueryRow(ctx, `SELECT count(DISTINCT id) FROM `+d+`.inbox WHERE consumer = $1 AND key = $2`, consumer, key).Scan(&rows))
				fmt.Printf("s2 snapshot, %s, s2 receives | %-16s %s  s1 inserted=%v  s2: %-40s rows with the key: %d\n", order, iso, d, r1[0].inserted, res, rows)
			}
		}
	}
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return err.Error()
}

func retryable(err error) bool {
	s := sqlstate(err)
	return s == "40001" || s == "40P01"
}

// ---- iso: 8 sessions, one key, a rotation in the middle ------------------------------------------

func iso(ctx context.Context, pool *pgxpool.Pool, trials int) {
	fmt.Printf("%-16s %-2s %7s %10s %12s %14s %12s %12s\n", "isolation", "d", "trials", "exactly1", "violations", "40001 retries", "g retries", "rot retries")
	for _, il := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable, "mixed"} {
		mixed := il == "mixed"
		if mixed {
			il = pgx.RepeatableRead
		}
		for _, d := range designs {
			var ok, bad, aborts, gretries, rotRetries int
			for t := 0; t < trials; t++ {
				key := fmt.Sprintf("iso-%d-%d", time.Now().UnixNano(), t)
				var wg, ready sync.WaitGroup
				start := make(chan struct{})
				var inserted, ab, gr atomic.Int64
				for s := 0; s < 8; s++ {
					wg.Add(1)
					ready.Add(1)
					go func(s int) {
						defer wg.Done()
						first := true
						for attempt := 0; attempt < 20; attempt++ {
							lvl := il
							if mixed && s%2 == 0 {
								lvl = pgx.ReadCommitted
							}
							tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: lvl})
							must(err)
							early := rand.Intn(2) == 0 // half the sessions take their snapshot before the barrier
							if early {
								must(exec(ctx, tx, `SELECT 1`))
							}
							if first {
								ready.Done()
								<-start
								first = false
							}
							time.Sleep(time.Duration(rand.Intn(8000)) * time.Microsecond)
							if !early {
								must(exec(ctx, tx, `SELECT 1`))
							}
							r, err := receive(ctx, tx, d, []string{key})
							if err == nil {
								err = tx.Commit(ctx)
							} else {
								_ = tx.Rollback(ctx)
							}
							if err != nil {
								if retryable(err) {
									ab.Add(1)
									continue
								}
								panic(err)
							}
							gr.Add(int64(r[0].retries))
							if r[0].inserted {
								inserted.Add(1)
							}
							return
						}
						panic("20 attempts")
					}(s)
				}
				ready.Wait()
				close(start)
				time.Sleep(time.Duration(rand.Intn(4000)) * time.Microsecond)
				for {
					_, err := rotate(ctx, pool, d)
					if err == nil {
						break
					}
					if !retryable(err) {
						must(err)
					}
					rotRetries++
				}
				wg.Wait()
				var rows int
				must(pool.QueryRow(ctx, `SELECT count(DISTINCT id) FROM `+d+`.inbox WHERE consumer = $1 AND key = $2`, consumer, key).Scan(&rows))
				if inserted.Load() == 1 && rows == 1 {
					ok++
				} else {
					bad++
				}
				aborts += int(ab.Load())
				gretries += int(gr.Load())
			}
			name := string(il)
			if mixed {
				name = "RC+RR mixed"
			}
			fmt.Printf("%-16s %-2s %7d %10d %12d %14d %12d %12d\n", name, d, trials, ok, bad, aborts, gretries, rotRetries)
		}
	}
}

// ---- bench: receive throughput, designs interleaved in rounds -------------------------------------

func bench(ctx context.Context, pool *pgxpool.Pool, secs int, rounds int) {
	for _, batch := range []int{1000, 1} {
		total := map[string]float64{}
		lat := map[string][]time.Duration{}
		ds := designs
		if batch == 1000 {
			ds = []string{"t", "k", "g"} // p: 8 x 1000 advisory locks exceed the lock table (see the note)
		}
		for r := 0; r < rounds; r++ {
			for _, d := range ds {
				var n atomic.Int64
				var mu sync.Mutex
				var wg sync.WaitGroup
				deadline := time.Now().Add(time.Duration(secs) * time.Second)
				for c := 0; c < 8; c++ {
					wg.Add(1)
					go func(c int) {
						defer wg.Done()
						i := 0
						var ls []time.Duration
						for time.Now().Before(deadline) {
							keys := make([]string, batch)
							for j := range keys {
								keys[j] = fmt.Sprintf("b%d-%d-r%d-c%d-%d-%d", batch, time.Now().UnixNano()%1e6, r, c, i, j)
							}
							i++
							t0 := time.Now()
							var err error
							if d == "p" {
								err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, e := receive(ctx, tx, d, keys); return e })
							} else {
								_, err = receive(ctx, pool, d, keys)
							}
							must(err)
							ls = append(ls, time.Since(t0))
							n.Add(int64(batch))
						}
						mu.Lock()
						lat[d] = append(lat[d], ls...)
						mu.Unlock()
					}(c)
				}
				wg.Wait()
				rate := float64(n.Load()) / float64(secs)
				total[d] += rate
				fmt.Printf("batch %4d round %d %s: %8.0f rows/s\n", batch, r, d, rate)
			}
		}
		for _, d := range ds {
			l := lat[d]
			sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
			fmt.Printf("batch %4d %s: mean %8.0f rows/s  ratio to t %.2f  p50 %v  p99 %v\n", batch, d, total[d]/float64(rounds),
				total[d]/total["t"], l[len(l)/2].Round(10*time.Microsecond), l[len(l)*99/100].Round(10*time.Microsecond))
		}
	}
}

// ---- rotcost: retire 1M rows --------------------------------------------------------------------

// load puts n rows into design d: 94% completed and expired, 5% pending (queued), 1% dead. In k and
// g they go into the slot the next rotation retires (generation -1, slot 2).
func load(ctx context.Context, pool *pgxpool.Pool, d string, n int) {
	cols := `id, consumer, key, kind, payload, fingerprint, state, completed_at, expires_at, last_error, result`
	sel := `SELECT i, 'c1', 'rc-' || i, 'order.created', jsonb_build_object('key', 'rc-' || i, 'amount', 1234, 'currency', 'EUR', 'note', 'retention study payload of a typical size'),
	        sha256(('x' || i)::bytea),
	        CASE WHEN i % 100 < 94 THEN 'completed' WHEN i % 100 < 99 THEN 'pending' ELSE 'dead' END,
	        CASE WHEN i % 100 < 94 OR i % 100 = 99 THEN now() - interval '2 hours' END,
	        CASE WHEN i % 100 < 94 THEN now() - interval '1 hour' END,
	        CASE WHEN i % 100 = 99 THEN 'boom' END,
	        CASE WHEN i % 100 < 94 THEN '{"ok":true}'::jsonb END
	        FROM generate_series(1, $1) AS i`
	switch d {
	case "t":
		must(exec(ctx, pool, `INSERT INTO t.inbox (`+cols+`) OVERRIDING SYSTEM VALUE `+sel, n))
		must(exec(ctx, pool, `SELECT setval('t.inbox_id_seq', $1)`, n))
	default:
		must(exec(ctx, pool, `INSERT INTO `+d+`.inbox (slot, `+cols+`) SELECT 2, * FROM (`+sel+`) s`, n))
		must(exec(ctx, pool, `SELECT setval('`+d+`.inbox_id_seq', $1)`, n))
		if d == "k" {
			must(exec(ctx, pool, `INSERT INTO k.inbox_keys SELECT consumer, key, id FROM k.inbox`))
		}
	}
	must(exec(ctx, pool, `INSERT INTO `+d+`.inbox_queue (id, consumer, run_at) SELECT id, consumer, now() + interval '1 day' FROM `+d+`.inbox WHERE state = 'pending'`))
	must(exec(ctx, pool, `VACUUM (ANALYZE) `+d+`.inbox`))
	if d == "k" {
		must(exec(ctx, pool, `VACUUM (ANALYZE) k.inbox_keys`))
	}
}

func walLSN(ctx context.Context, pool *pgxpool.Pool) string {
	var l string
	must(pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&l))
	return l
}

func walSince(ctx context.Context, pool *pgxpool.Pool, from string) float64 {
	var b float64
	must(pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)`, from).Scan(&b))
	return b / 1e6
}

// probe receives one new key every 5 ms on its own connection until stop, and returns the longest
// receive and the number of receives.
func probe(ctx context.Context, pool *pgxpool.Pool, d string, stop chan struct{}) (chan time.Duration, chan int) {
	maxc, nc := make(chan time.Duration, 1), make(chan int, 1)
	go func() {
		var mx time.Duration
		n := 0
		for {
			select {
			case <-stop:
				maxc <- mx
				nc <- n
				return
			default:
			}
			t0 := time.Now()
			_, err := receive(ctx, pool, d, []string{fmt.Sprintf("probe-%d", time.Now().UnixNano())})
			must(err)
			if dt := time.Since(t0); dt > mx {
				mx = dt
			}
			n++
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return maxc, nc
}

func sizeMB(ctx context.Context, pool *pgxpool.Pool, d string) float64 {
	var b float64
	must(pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname IN ('inbox', 'inbox_s0', 'inbox_s1', 'inbox_s2', 'inbox_keys')`, d).Scan(&b))
	return b / 1e6
}

func rotcost(ctx context.Context, pool *pgxpool.Pool, n int) {
	setup(ctx, pool)
	for _, d := range []string{"t", "k", "g"} {
		t0 := time.Now()
		load(ctx, pool, d, n)
		fmt.Printf("%s: loaded %d rows in %v, size %.0f MB\n", d, n, time.Since(t0).Round(time.Millisecond), sizeMB(ctx, pool, d))
	}
	must(exec(ctx, pool, `CHECKPOINT`)) // full-page images: every design starts after a checkpoint
	for _, d := range []string{"t", "k", "g"} {
		must(exec(ctx, pool, `CHECKPOINT`))
		stop := make(chan struct{})
		maxc, nc := probe(ctx, pool, d, stop)
		time.Sleep(200 * time.Millisecond)
		lsn := walLSN(ctx, pool)
		t0 := time.Now()
		var moved int64
		if d == "t" {
			// the flat layout's cleaner: CleanExpiredRange over the id span, 1000 rows a statement, then VACUUM
			var after int64
			for {
				var picked, deleted, last int64
				must(pool.QueryRow(ctx, `WITH picked AS (
    SELECT m.id FROM t.inbox m
    WHERE m.id > $1 AND m.id <= $2 AND m.consumer = 'c1' AND m.state = 'completed' AND m.expires_at < now()
    ORDER BY m.id LIMIT 1000 FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM t.inbox m USING picked WHERE m.id = picked.id AND m.consumer = 'c1' AND m.state = 'completed' AND m.expires_at < now()
    RETURNING m.id
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), coalesce((SELECT max(id) FROM picked), 0)`,
					after, after+10000).Scan(&picked, &deleted, &last))
				moved += deleted
				if picked == 1000 {
					after = last
				} else {
					after += 10000
				}
				if after >= int64(n) {
					break
				}
			}
		} else {
			_, err := pool.Exec(ctx, `SET lock_timeout = '5s'`)
			must(err)
			moved, _ = rotate(ctx, pool, d)
		}
		el := time.Since(t0)
		wal := walSince(ctx, pool, lsn)
		close(stop)
		mx, cnt := <-maxc, <-nc
		line := fmt.Sprintf("%s: retire: %v, WAL %.1f MB, rows %s %d, longest concurrent single receive %v (%d receives)",
			d, el.Round(time.Millisecond), wal, map[bool]string{true: "deleted", false: "copied"}[d == "t"], moved, mx.Round(time.Millisecond), cnt)
		if d == "t" {
			lsn = walLSN(ctx, pool)
			t1 := time.Now()
			must(exec(ctx, pool, `VACUUM t.inbox`))
			line += fmt.Sprintf("; then VACUUM %v, WAL %.1f MB", time.Since(t1).Round(time.Millisecond), walSince(ctx, pool, lsn))
		}
		fmt.Println(line)
		fmt.Printf("%s: size after %.0f MB\n", d, sizeMB(ctx, pool, d))
	}
}

// ---- sizes: compressed window, held snapshot ----------------------------------------------------

func sizes(ctx context.Context, pool *pgxpool.Pool, secs, window, rate int, holdFrom, holdTo int) {
	setup(ctx, pool)
	ds := []string{"t", "k", "g"}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var received, completed [3]atomic.Int64
	var rotations, rotFail [3]atomic.Int64
	var cleaned [3]atomic.Int64
	for di, d := range ds {
		wg.Add(3)
		go func() { // producer: rate msgs/s in batches of rate/5 every 200 ms
			defer wg.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				keys := make([]string, rate/5)
				for j := range keys {
					keys[j] = fmt.Sprintf("s-%d-%d", i, j)
				}
				if _, err := receive(ctx, pool, d, keys); err != nil && ctx.Err() == nil {
					panic(err)
				}
				received[di].Add(int64(len(keys)))
			}
		}()
		go func() { // worker: completes what was queued (1%% dies), every 200 ms
			defer wg.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				tag, err := pool.Exec(ctx, fmt.Sprintf(`WITH d AS (
    DELETE FROM %[1]s.inbox_queue q WHERE q.consumer = 'c1' AND q.id = ANY (ARRAY(
        SELECT id FROM %[1]s.inbox_queue WHERE consumer = 'c1' ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED))
    RETURNING q.id
)
UPDATE %[1]s.inbox m SET state = CASE WHEN m.id %% 100 = 0 THEN 'dead' ELSE 'completed' END, completed_at = now(),
    expires_at = CASE WHEN m.id %% 100 = 0 THEN NULL ELSE now() + make_interval(secs => %[2]d) END,
    last_error = CASE WHEN m.id %% 100 = 0 THEN 'boom' END, result = '{"ok":true}'
FROM d WHERE m.id = d.id AND m.consumer = 'c1'`, d, window))
				if err != nil && ctx.Err() == nil {
					panic(err)
				}
				completed[di].Add(tag.RowsAffected())
			}
		}()
		go func() { // retention: t cleans every 10 s (CleanExpiredRange over all ids); k, g rotate every window
			defer wg.Done()
			every := 10 * time.Second
			if d != "t" {
				every = time.Duration(window) * time.Second
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			conn, err := pool.Acquire(ctx)
			must(err)
			defer conn.Release()
			_, err = conn.Exec(ctx, `SET lock_timeout = '1s'`)
			must(err)
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if d == "t" {
					var after int64
					for ctx.Err() == nil {
						var picked, deleted, last, maxID int64
						if err := conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM t.inbox`).Scan(&maxID); err != nil {
							break
						}
						if after >= maxID {
							break
						}
						if err := conn.QueryRow(ctx, `WITH picked AS (
    SELECT m.id FROM t.inbox m
    WHERE m.id > $1 AND m.id <= $2 AND m.consumer = 'c1' AND m.state = 'completed' AND m.expires_at < now()
    ORDER BY m.id LIMIT 1000 FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM t.inbox m USING picked WHERE m.id = picked.id AND m.consumer = 'c1' AND m.state = 'completed' AND m.expires_at < now()
    RETURNING m.id
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), coalesce((SELECT max(id) FROM picked), 0)`,
							after, after+10000).Scan(&picked, &deleted, &last); err != nil {
							break
						}
						cleaned[di].Add(deleted)
						if picked == 1000 {
							after = last
						} else {
							after += 10000
						}
					}
					continue
				}
				if _, err := rotate(ctx, conn, d); err != nil {
					if ctx.Err() != nil {
						return
					}
					rotFail[di].Add(1)
					fmt.Printf("  %s rotation failed: %s\n", d, sqlstate(err))
					continue
				}
				rotations[di].Add(1)
			}
		}()
	}
	// the held snapshot: an idle REPEATABLE READ transaction that read nothing of txinbox
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(holdFrom) * time.Second):
		}
		tx, err := pool.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		must(err)
		must(exec(context.Background(), tx, `SELECT count(*) FROM pg_class`))
		fmt.Printf("  t=%ds: snapshot held\n", holdFrom)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(holdTo-holdFrom) * time.Second):
		}
		_ = tx.Rollback(context.Background())
		fmt.Printf("  t=%ds: snapshot released\n", holdTo)
	}()
	t0 := time.Now()
	fmt.Printf("%5s  %-28s %-28s %-28s\n", "t(s)", "t: MB (rows live/dead)", "k: MB (rows)", "g: MB (rows)")
	for el := 0; el <= secs; el += 15 {
		time.Sleep(time.Until(t0.Add(time.Duration(el) * time.Second)))
		var cells []string
		for _, d := range ds {
			var live, dead int64
			_ = pool.QueryRow(context.Background(), `SELECT coalesce(sum(n_live_tup), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint
				FROM pg_stat_user_tables WHERE schemaname = $1 AND relname IN ('inbox', 'inbox_s0', 'inbox_s1', 'inbox_s2', 'inbox_keys')`, d).Scan(&live, &dead)
			cells = append(cells, fmt.Sprintf("%6.1f (%d/%d)", sizeMB(context.Background(), pool, d), live, dead))
		}
		fmt.Printf("%5d  %-28s %-28s %-28s\n", el, cells[0], cells[1], cells[2])
	}
	cancel()
	wg.Wait()
	for di, d := range ds {
		fmt.Printf("%s: received %d, finished %d, rotations %d (failed %d), rows deleted by cleaner %d\n", d,
			received[di].Load(), completed[di].Load(), rotations[di].Load(), rotFail[di].Load(), cleaned[di].Load())
	}
}

// ---- helpers ------------------------------------------------------------------------------------

func exec(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) error {
	_, err := db.Exec(ctx, sql, args...)
	return err
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fatal:", err)
		os.Exit(1)
	}
}

func main() {
	trials := flag.Int("trials", 30, "iso: trials per cell")
	secs := flag.Int("secs", 5, "bench: seconds per round; sizes: total seconds")
	rounds := flag.Int("rounds", 2, "bench: rounds")
	rows := flag.Int("rows", 1000000, "rotcost: rows")
	window := flag.Int("window", 30, "sizes: dedup window (s), also the rotation period")
	rate := flag.Int("rate", 250, "sizes: messages per second per design")
	holdFrom := flag.Int("hold-from", 60, "sizes: snapshot held from (s)")
	holdTo := flag.Int("hold-to", 120, "sizes: snapshot held until (s)")
	flag.Parse()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(*dbURL)
	must(err)
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	must(err)
	defer pool.Close()
	switch flag.Arg(0) {
	case "setup":
		setup(ctx, pool)
	case "rrdemo":
		rrdemo(ctx, pool)
	case "iso":
		iso(ctx, pool, *trials)
	case "bench":
		setup(ctx, pool)
		bench(ctx, pool, *secs, *rounds)
	case "rotcost":
		rotcost(ctx, pool, *rows)
	case "sizes":
		sizes(ctx, pool, *secs, *window, *rate, *holdFrom, *holdTo)
	default:
		fmt.Fprintln(os.Stderr, "mode: setup | rrdemo | iso | bench | rotcost | sizes")
		os.Exit(2)
	}
}
