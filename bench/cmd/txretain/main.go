// Command txretain measures retention under a sustained, compressed dedup window: it receives
// messages at a steady rate with inbox.Client.ReceiveMany, drains them with a worker.Pool whose
// handler inserts one row into a side table in the handler's transaction, runs the retention passes,
// and prints one line per minute: the inbox's size (table and indexes, every partition), the WAL
// written per message, messages received and completed, dead tuples. With --hold-at it opens a REPEATABLE READ transaction on another connection at that time
// and keeps it open for --hold-for (a held xmin horizon).
//
// It runs on the public APIs of both trees: before migration 00006 (commit b2d7f61, one plain inbox
// table, rows deleted by the Cleaner of package retention) and after it (a ring of generation partitions,
// retention.Rotate); what differs between the two trees' retention is in cleaner_new.go and
// cleaner_old.go (build tag oldlayout). bench/retention.sh builds it in both trees and runs them side
// by side, each against a PostgreSQL cluster of its own.
//
// `txretain chart RUNSDIR` (chart.go) draws the runs kept in RUNSDIR and writes their table into
// bench/RESULTS.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/worker"
)

const (
	consumer = "ledger"
	kind     = "credit"
	slowCall = time.Second // a ReceiveMany call or a cleaner pass at least this long is printed on a line of its own
)

type options struct {
	url         string
	label       string
	rate        int
	batch       int
	tick        time.Duration
	duration    time.Duration
	retention   time.Duration
	interval    time.Duration
	sample      time.Duration
	concurrency int
	receivers   int
	holdAt      time.Duration
	holdFor     time.Duration
	planCache   string
	fullSweep   time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "chart" {
		os.Exit(chartCommand(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.url, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL to use (schema public of this database: use a throwaway cluster)")
	flag.StringVar(&o.label, "label", layout, "name printed on every line")
	flag.IntVar(&o.rate, "rate", 400, "messages received per second")
	flag.IntVar(&o.batch, "batch", 20, "most messages per ReceiveMany call")
	flag.DurationVar(&o.tick, "tick", 50*time.Millisecond, "receive ticker: each tick receives what the rate says is due, in calls of at most --batch")
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "length of the run")
	flag.DurationVar(&o.retention, "retention", time.Minute, "Store.Retention (the dedup window); new layout: also retention.RotateOptions.Generation")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "time between two retention passes (old layout: Cleaner.RunOnce; new: Rotate and DeleteExpiredKeys)")
	flag.DurationVar(&o.fullSweep, "full-sweep", 0, "old layout only: retention.Config.FullSweepInterval (0: its default, 1h)")
	flag.DurationVar(&o.sample, "sample", 5*time.Second, "size sampling period within a minute (min and max are reported)")
	flag.IntVar(&o.concurrency, "concurrency", 4, "worker.Config.Concurrency")
	flag.IntVar(&o.receivers, "receivers", 2, "goroutines calling ReceiveMany")
	flag.DurationVar(&o.holdAt, "hold-at", 0, "open a REPEATABLE READ transaction (held xmin) at this time since the start; 0: never")
	flag.DurationVar(&o.holdFor, "hold-for", 5*time.Minute, "how long the held transaction stays open")
	flag.StringVar(&o.planCache, "plan-cache-mode", "", "plan_cache_mode of the pool's connections (auto, force_custom_plan, force_generic_plan); empty: the server's (auto)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "txretain %s: %v\n", o.label, err)
		os.Exit(1)
	}
}

// counters are shared by the receiver, the handler and the cleaner loop.
type counters struct {
	received, handled             atomic.Int64
	lat                           latencies // of ReceiveMany calls
	passes, passErrors            atomic.Int64
	deleted, rotations, copied    atomic.Int64
	rotateMicros, maxRotateMicros atomic.Int64
}

func run(ctx context.Context, o options) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("layout", o.label)
	cfg, err := pgxpool.ParseConfig(o.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(o.concurrency + o.receivers + 5) // batches + LISTEN + receivers + cleaner lock and statements
	cfg.ConnConfig.RuntimeParams["application_name"] = "txretain"
	if o.planCache != "" {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = o.planCache
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := txinbox.Store{DB: pool, Retention: o.retention}
	if err := migrate.Up(ctx, store); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS ledger (event_id text NOT NULL, amount bigint NOT NULL)`); err != nil {
		return err
	}
	mon, err := pgx.Connect(ctx, o.url)
	if err != nil {
		return err
	}
	defer func() { _ = mon.Close(context.WithoutCancel(ctx)) }()
	var version int64
	if err := mon.QueryRow(ctx, `SELECT max(version_id) FROM `+migrate.VersionTable).Scan(&version); err != nil {
		return err
	}
	var partitioned bool
	if err := mon.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = 'inbox'::regclass`).Scan(&partitioned); err != nil {
		return err
	}
	fmt.Printf("# layout=%s schema_version=%d inbox_partitioned=%t rate=%d/s batch=%d tick=%s receivers=%d duration=%s retention=%s interval=%s concurrency=%d hold_at=%s hold_for=%s plan_cache_mode=%q cleaner=%q\n",
		o.label, version, partitioned, o.rate, o.batch, o.tick, o.receivers, o.duration, o.retention, o.interval, o.concurrency, o.holdAt, o.holdFor, o.planCache, cleanerSettings(o))

	var c counters
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		return err
	}
	hs := worker.NewHandlers()
	type payload struct {
		N      int64 `json:"n"`
		Amount int64 `json:"amount"`
	}
	worker.Handle(hs, kind, func(ctx context.Context, tx pgx.Tx, m *worker.Message[payload]) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (event_id, amount) VALUES ($1, $2)`, m.Key, m.Payload.Amount)
		if err == nil {
			c.handled.Add(1)
		}
		return err
	})
	p, err := newPool(store, worker.Config{Consumer: consumer, Handlers: hs, Concurrency: o.concurrency}, log)
	if err != nil {
		return err
	}
	cl, err := newCleaner(store, o, log)
	if err != nil {
		return err
	}

	m0, err := measure(ctx, mon)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := p.Start(runCtx); err != nil {
		return err
	}
	start := time.Now()
	errc := make(chan error, 3)
	go func() { errc <- receive(runCtx, client, o, start, &c) }()
	go cleanLoop(runCtx, cl, o, start, &c, log)
	var holdDone chan error
	if o.holdAt > 0 {
		holdDone = make(chan error, 1)
		go func() { holdDone <- hold(runCtx, o, start) }()
	}

	var rows []minute
	prev := m0
	var prevC snapshot
	samples := time.NewTicker(o.sample)
	defer samples.Stop()
	lo, hi := prev.inboxBytes, prev.inboxBytes
	var runErr error
loop:
	for i := 1; time.Duration(i)*time.Minute <= o.duration; {
		end := start.Add(time.Duration(i) * time.Minute)
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			break loop
		case err := <-errc:
			runErr = fmt.Errorf("receive: %w", err)
			break loop
		case <-samples.C:
			if time.Now().Before(end.Add(-o.sample / 2)) {
				if m, err := measure(ctx, mon); err == nil {
					lo, hi = min(lo, m.inboxBytes), max(hi, m.inboxBytes)
				}
				continue
			}
			time.Sleep(time.Until(end))
		case <-time.After(time.Until(end)):
		}
		m, err := measure(ctx, mon)
		if err != nil {
			runErr = err
			break loop
		}
		cs := c.snapshot()
		lat := c.lat.take()
		lo, hi = min(lo, m.inboxBytes), max(hi, m.inboxBytes)
		r := minute{n: i, at: time.Since(start), m: m, lo: lo, hi: hi, wal: m.lsn - prev.lsn,
			lat: lat, received: cs.received - prevC.received, handled: cs.handled - prevC.handled, c: cs, prevC: prevC,
			held: o.holdAt > 0 && time.Duration(i)*time.Minute > o.holdAt && time.Duration(i-1)*time.Minute < o.holdAt+o.holdFor}
		fmt.Println(r.line(o.label))
		rows = append(rows, r)
		prev, prevC = m, cs
		lo, hi = m.inboxBytes, m.inboxBytes
		i++
	}
	cancel()
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer stopCancel()
	if err := p.Stop(stopCtx); err != nil {
		log.Warn("stopping the pool", "err", err)
	}
	if holdDone != nil {
		if err := <-holdDone; err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("held transaction", "err", err)
		}
	}
	if runErr != nil {
		return runErr
	}
	return summary(stopCtx, mon, o, m0, rows, &c)
}

// receive receives o.rate messages per second: every tick, a pacer hands out what is due since
// start in batches of at most o.batch messages, and o.receivers goroutines receive them with
// ReceiveMany. When the receivers fall behind, the pacer waits for them (the batches queued are
// bounded), so what was received shows in the counters, not what was due.
func receive(ctx context.Context, client *inbox.Client, o options, start time.Time, c *counters) error {
	type span struct{ first, n int64 }
	work := make(chan span, o.receivers)
	errc := make(chan error, o.receivers)
	for range o.receivers {
		go func() {
			msgs := make([]inbox.Message, 0, o.batch)
			for sp := range work {
				msgs = msgs[:0]
				for n := sp.first; n < sp.first+sp.n; n++ {
					msgs = append(msgs, inbox.Message{Consumer: consumer, Key: fmt.Sprintf("evt-%09d", n), Kind: kind,
						Payload: fmt.Appendf(nil, `{"n":%d,"amount":%d}`, n, n%100+1)})
				}
				t0 := time.Now()
				rs, err := client.ReceiveMany(ctx, msgs)
				d := time.Since(t0)
				c.lat.add(d)
				if d >= slowCall {
					fmt.Printf("# %s slow receive: t=%s took=%s\n", o.label, t0.Sub(start).Round(time.Millisecond), d.Round(time.Millisecond))
				}
				if err == nil {
					for _, r := range rs {
						if r.Outcome != inbox.Inserted {
							err = fmt.Errorf("message %d: outcome %v, want Inserted", r.ID, r.Outcome)
						}
					}
				}
				if err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
				c.received.Add(sp.n)
			}
		}()
	}
	defer close(work)
	t := time.NewTicker(o.tick)
	defer t.Stop()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-t.C:
		}
		due := int64(time.Since(start).Seconds() * float64(o.rate))
		for sent < due {
			sp := span{first: sent + 1, n: min(int64(o.batch), due-sent)}
			select {
			case <-ctx.Done():
				return nil
			case err := <-errc:
				return err
			case work <- sp:
			}
			sent += sp.n
		}
	}
}

// cleanLoop runs a retention pass every interval, counting what the passes did.
func cleanLoop(ctx context.Context, cl *cleaner, o options, start time.Time, c *counters, log *slog.Logger) {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		t0 := time.Now()
		ps, err := cl.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		took := time.Since(t0)
		c.passes.Add(1)
		if err != nil {
			c.passErrors.Add(1)
			log.Warn("cleaner pass failed", "err", err)
		}
		if err != nil || ps.rotated || took >= slowCall {
			fmt.Printf("# %s cleaner pass: t=%s took=%s deleted=%d rotated=%t copied=%d rotation=%s err=%v\n", o.label,
				t0.Sub(start).Round(time.Millisecond), took.Round(time.Millisecond), ps.deleted, ps.rotated, ps.copied,
				ps.rotation.Round(time.Millisecond), err)
		}
		c.deleted.Add(ps.deleted)
		if ps.rotated {
			c.rotations.Add(1)
			c.copied.Add(ps.copied)
			us := ps.rotation.Microseconds()
			c.rotateMicros.Add(us)
			if us > c.maxRotateMicros.Load() {
				c.maxRotateMicros.Store(us)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// passStats is what one retention pass did: rows deleted (old layout) or a rotation (new layout).
type passStats struct {
	deleted  int64
	rotated  bool
	copied   int64
	rotation time.Duration
}

// hold opens a REPEATABLE READ transaction at o.holdAt, reads pg_class in it and keeps it open for
// o.holdFor: its snapshot holds back the xmin horizon of the database.
func hold(ctx context.Context, o options, start time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(start.Add(o.holdAt))):
	}
	conn, err := pgx.Connect(ctx, o.url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM pg_class LIMIT 1`); err != nil {
		return err
	}
	fmt.Printf("# %s held transaction opened at %s\n", o.label, time.Since(start).Round(time.Second))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.holdFor):
	}
	err = tx.Commit(ctx)
	fmt.Printf("# %s held transaction ended at %s\n", o.label, time.Since(start).Round(time.Second))
	return err
}

// stats is one reading of the server.
type stats struct {
	lsn                    int64 // pg_current_wal_lsn() - '0/0'
	inboxBytes, queueBytes int64 // pg_total_relation_size: inbox and every partition; inbox_queue
	inboxLive, inboxDead   int64 // n_live_tup, n_dead_tup summed over inbox and its partitions
	queueDead              int64
	queueRows              int64  // count(*) of inbox_queue: messages not completed
	parts                  string // MB of each table holding inbox rows (the partitions, or inbox)
	inboxVacuums           int64  // autovacuum_count summed over inbox and its partitions
	queueVacuums           int64
}

func measure(ctx context.Context, conn *pgx.Conn) (stats, error) {
	var s stats
	err := conn.QueryRow(ctx, `
		WITH parts AS (SELECT 'inbox'::regclass AS relid UNION SELECT relid FROM pg_partition_tree('inbox')),
		     st AS (SELECT coalesce(sum(n_live_tup), 0)::bigint AS live, coalesce(sum(n_dead_tup), 0)::bigint AS dead,
		                   coalesce(sum(autovacuum_count), 0)::bigint AS av
		            FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM parts))
		SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		       (SELECT sum(pg_total_relation_size(relid))::bigint FROM parts),
		       pg_total_relation_size('inbox_queue'),
		       st.live, st.dead, st.av,
		       q.n_dead_tup, q.autovacuum_count,
		       (SELECT count(*) FROM inbox_queue),
		       (SELECT string_agg(c.relname || ':' || round(pg_total_relation_size(c.oid) / 1048576.0, 1), '/' ORDER BY c.relname)
		        FROM parts JOIN pg_class c ON c.oid = parts.relid WHERE c.relkind = 'r')
		FROM st, pg_stat_user_tables q WHERE q.relid = 'inbox_queue'::regclass`).
		Scan(&s.lsn, &s.inboxBytes, &s.queueBytes, &s.inboxLive, &s.inboxDead, &s.inboxVacuums, &s.queueDead, &s.queueVacuums, &s.queueRows, &s.parts)
	return s, err
}

type snapshot struct {
	received, handled, passes, passErrors, deleted, rotations, copied, rotateMicros, maxRotateMicros int64
}

func (c *counters) snapshot() snapshot {
	return snapshot{c.received.Load(), c.handled.Load(), c.passes.Load(), c.passErrors.Load(), c.deleted.Load(),
		c.rotations.Load(), c.copied.Load(), c.rotateMicros.Load(), c.maxRotateMicros.Load()}
}

type minute struct {
	n                 int
	at                time.Duration
	m                 stats
	lo, hi            int64 // least and most inbox bytes sampled in the minute
	wal               int64
	received, handled int64
	lat               []time.Duration // ReceiveMany calls in the minute, sorted
	c, prevC          snapshot
	held              bool
}

func mb(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func (r minute) line(label string) string {
	walPerMsg := "-"
	if r.handled > 0 {
		walPerMsg = fmt.Sprint(r.wal / r.handled)
	}
	return fmt.Sprintf("minute=%d layout=%s inbox_mb=%s inbox_min_mb=%s inbox_max_mb=%s queue_mb=%s wal_mb=%s wal_b_per_msg=%s recv_per_s=%.0f done_per_s=%.0f recv_p50_ms=%s recv_p99_ms=%s recv_max_ms=%s queue_rows=%d inbox_live=%d inbox_dead=%d queue_dead=%d inbox_autovac=%d queue_autovac=%d deleted=%d rotations=%d copied=%d clean_errors=%d held=%t parts_mb=%s",
		r.n, label, mb(r.m.inboxBytes), mb(r.lo), mb(r.hi), mb(r.m.queueBytes), mb(r.wal), walPerMsg,
		float64(r.received)/60, float64(r.handled)/60, pct(r.lat, 0.5), pct(r.lat, 0.99), pct(r.lat, 1), r.m.queueRows, r.m.inboxLive, r.m.inboxDead, r.m.queueDead,
		r.m.inboxVacuums, r.m.queueVacuums, r.c.deleted-r.prevC.deleted, r.c.rotations-r.prevC.rotations,
		r.c.copied-r.prevC.copied, r.c.passErrors-r.prevC.passErrors, r.held, r.m.parts)
}

func summary(ctx context.Context, conn *pgx.Conn, o options, m0 stats, rows []minute, c *counters) error {
	if len(rows) == 0 {
		return errors.New("no minute measured")
	}
	last := rows[len(rows)-1]
	var ledger int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&ledger); err != nil {
		return err
	}
	cs := c.snapshot()
	var walPerMsg int64
	if last.c.handled > 0 {
		walPerMsg = (last.m.lsn - m0.lsn) / last.c.handled
	}
	// Flatness of the inbox's size over the last five minutes (end-of-minute readings and the
	// least and most sampled within them).
	tail := rows[max(0, len(rows)-5):]
	lo, hi, endLo, endHi := tail[0].lo, tail[0].hi, tail[0].m.inboxBytes, tail[0].m.inboxBytes
	for _, r := range tail {
		lo, hi = min(lo, r.lo), max(hi, r.hi)
		endLo, endHi = min(endLo, r.m.inboxBytes), max(endHi, r.m.inboxBytes)
	}
	avgRot := "-"
	if cs.rotations > 0 {
		avgRot = (time.Duration(cs.rotateMicros/cs.rotations) * time.Microsecond).String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "summary layout=%s minutes=%d received=%d completed=%d ledger_rows=%d wal_mb=%s wal_b_per_msg=%d ",
		o.label, len(rows), last.c.received, last.c.handled, ledger, mb(last.m.lsn-m0.lsn), walPerMsg)
	fmt.Fprintf(&b, "last5_end_mb=%s..%s last5_sampled_mb=%s..%s passes=%d clean_errors=%d deleted=%d rotations=%d copied=%d rotation_avg=%s rotation_max=%s",
		mb(endLo), mb(endHi), mb(lo), mb(hi), cs.passes, cs.passErrors, cs.deleted, cs.rotations, cs.copied, avgRot,
		time.Duration(cs.maxRotateMicros)*time.Microsecond)
	fmt.Println(b.String())
	return nil
}

// latencies collects call durations until take.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// take returns the durations collected since the last take, sorted, and forgets them.
func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	d := l.d
	l.d = nil
	l.mu.Unlock()
	slices.Sort(d)
	return d
}

// pct returns the q quantile of sorted d in milliseconds ("-" if d is empty).
func pct(d []time.Duration, q float64) string {
	if len(d) == 0 {
		return "-"
	}
	i := min(len(d)-1, int(q*float64(len(d))))
	return fmt.Sprintf("%.1f", float64(d[i].Microseconds())/1000)
}
