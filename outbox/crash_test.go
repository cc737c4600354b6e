package outbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// The crash test runs a relay in a child process (this test binary, re-executed) and kills it with
// SIGKILL: a real process death, with its connections closed by the kernel.

const childEnv = "TXINBOX_OUTBOX_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// dbPublisher is the downstream of the crash test: it "sends" each event by inserting it into the
// table received of schema (autocommit: what was sent stays sent), and after hangAfter events (0:
// never) it writes the file marker and blocks forever, ignoring its ctx, until the process is killed.
type dbPublisher struct {
	db        *pgxpool.Pool
	schema    string
	hangAfter int64
	marker    string
	sent      atomic.Int64
}

func (p *dbPublisher) Publish(ctx context.Context, events []outbox.Event) error {
	for _, ev := range events {
		if _, err := p.db.Exec(ctx, "INSERT INTO "+pgx.Identifier{p.schema, "received"}.Sanitize()+" (event_id, key) VALUES ($1, $2)", ev.ID, ev.Key); err != nil {
			return err
		}
		if n := p.sent.Add(1); p.hangAfter > 0 && n == p.hangAfter {
			_ = os.WriteFile(p.marker, []byte("x"), 0o600)
			select {} // the parent kills us here: sent, not recorded
		}
	}
	return nil
}

// child runs a relay until it is killed. TXINBOX_CHILD_URL and TXINBOX_CHILD_SCHEMA name the
// database; the publisher hangs after TXINBOX_CHILD_HANG_AFTER events (see dbPublisher).
func child() int {
	ctx := context.Background()
	schema := os.Getenv("TXINBOX_CHILD_SCHEMA")
	pool, err := pgxpool.New(ctx, os.Getenv("TXINBOX_CHILD_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	hang, _ := strconv.ParseInt(os.Getenv("TXINBOX_CHILD_HANG_AFTER"), 10, 64)
	pub := &dbPublisher{db: pool, schema: schema, hangAfter: hang, marker: os.Getenv("TXINBOX_CHILD_MARKER")}
	r, err := outbox.NewRelay(txinbox.Store{DB: pool, Schema: schema}, outbox.RelayConfig{Publisher: pub,
		BatchSize: 10, Concurrency: 2, PollInterval: 20 * time.Millisecond, Lease: 2 * time.Second, Timeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	// A short snooze: the kill may come between another runner's record and its OutboxReadyNext.
	outbox.SetSnooze(r, 2*time.Second)
	if err := r.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	select {}
}

// A relay killed (SIGKILL) in the middle of a batch, after its Publisher sent some of the batch's
// events and before anything of the batch was recorded: once the leases end, another relay takes its
// claims over, and every committed event is published, each key's first arrivals in commit order;
// the events sent but not recorded are published again (at least once).
func TestRelayKilledMidBatchThenRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.Pool.Exec(ctx, e.SQL(`CREATE TABLE {schema}.received (
		seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id text NOT NULL, key text NOT NULL)`)); err != nil {
		t.Fatal(err)
	}
	order := map[string][]string{}
	var all []string
	for i := range 14 {
		var msgs []outbox.Message
		for j := range 5 {
			key := fmt.Sprintf("k%d", (i+j)%6) // "k5" stands for no key
			if key == "k5" {
				key = ""
			}
			msgs = append(msgs, msg("t", key, i*5+j))
		}
		for j, id := range e.publish(t, msgs...) {
			order[msgs[j].Key] = append(order[msgs[j].Key], id)
			all = append(all, id)
		}
	}

	marker := filepath.Join(t.TempDir(), "hung")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "TXINBOX_CHILD_URL="+e.URL, "TXINBOX_CHILD_SCHEMA="+e.Schema,
		"TXINBOX_CHILD_HANG_AFTER=25", "TXINBOX_CHILD_MARKER="+marker)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child relay to hang mid-batch", func() bool { _, err := os.Stat(marker); return err == nil })
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if n := e.count(t, "sent"); n >= int64(len(all)) {
		t.Fatalf("%d events already sent before the kill", n)
	}

	run(t, e.relay(t, &dbPublisher{db: e.Pool, schema: e.Schema}, func(c *outbox.RelayConfig) {
		c.Lease, c.Timeout, c.BatchSize = 2*time.Second, time.Second, 10
	}))
	waitFor(t, "every event sent", func() bool { return e.count(t, "sent") == int64(len(all)) })

	rows, err := e.Pool.Query(ctx, e.SQL(`SELECT event_id, key FROM {schema}.received ORDER BY seq`))
	if err != nil {
		t.Fatal(err)
	}
	var arrived []outbox.Event
	for rows.Next() {
		var ev outbox.Event
		if err := rows.Scan(&ev.ID, &ev.Key); err != nil {
			t.Fatal(err)
		}
		arrived = append(arrived, ev)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	first := firstArrivals(arrived)
	var distinct []string
	for key, want := range order {
		got := first[key]
		distinct = append(distinct, got...)
		if key != "" && !slices.Equal(got, want) {
			t.Errorf("key %s: first arrivals %v, want the commit order %v", key, got, want)
		}
	}
	slices.Sort(distinct)
	slices.Sort(all)
	if !slices.Equal(distinct, all) {
		t.Fatalf("%d distinct events arrived, want the %d committed", len(distinct), len(all))
	}
	if again := len(arrived) - len(all); again < 1 {
		t.Errorf("%d events arrived twice, want at least the one sent by the killed relay before its record", again)
	} else {
		t.Logf("%d events, %d arrivals: %d sent again after the kill", len(all), len(arrived), again)
	}
}
