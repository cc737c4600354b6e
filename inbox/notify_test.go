package inbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// listener listens on the schema's channel on a connection of its own.
type listener struct {
	conn    *pgx.Conn
	db      *testdb.DB
	channel string
}

func listen(t *testing.T, db *testdb.DB) *listener {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	ch := (txinbox.Store{Schema: db.Schema}).NotifyChannel()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return &listener{conn: conn, db: db, channel: ch}
}

// received returns the payloads notified since the last call: it sends a marker from another session
// and reads up to it (notifications arrive in commit order).
func (l *listener) received(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := l.db.Pool.Exec(ctx, "SELECT pg_notify($1, 'marker')", l.channel); err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		n, err := l.conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload == "marker" {
			return out
		}
		out = append(out, n.Payload)
	}
}

func TestNotifyOnNewMessagesOnly(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	c, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: time.Nanosecond}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, db)
	check := func(what string, want ...string) {
		t.Helper()
		if got := l.received(t); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: notified %q, want %q", what, got, want)
		}
	}

	if _, err := c.Receive(ctx, ledgertest.Message("k1", `{}`)); err != nil {
		t.Fatal(err)
	}
	check("new message", "ledger")
	if _, err := c.Receive(ctx, ledgertest.Message("k1", `{}`)); err != nil {
		t.Fatal(err)
	}
	check("duplicate")

	// Two consumers in one batch: one notification each (the new one only).
	other := ledgertest.Message("k2", `{}`)
	other.Consumer = "billing"
	if _, err := c.ReceiveMany(ctx, []inbox.Message{ledgertest.Message("k2", `{}`), other, ledgertest.Message("k1", `{}`), ledgertest.Message("k3", `{}`)}); err != nil {
		t.Fatal(err)
	}
	if got := l.received(t); len(got) != 2 || !(got[0] == "ledger" && got[1] == "billing" || got[0] == "billing" && got[1] == "ledger") {
		t.Fatalf("two consumers: notified %q", got)
	}

	// Inside a transaction: sent at commit, never on rollback.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReceiveTx(ctx, tx, ledgertest.Message("k4", `{}`)); err != nil {
		t.Fatal(err)
	}
	check("before commit")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	check("after commit", "ledger")
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReceiveTx(ctx, tx, ledgertest.Message("k5", `{}`)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	check("rolled back")

	// NotifyInterval < 0: never.
	quiet, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: -1}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := quiet.Receive(ctx, ledgertest.Message("k6", `{}`)); err != nil {
		t.Fatal(err)
	}
	check("notifications disabled")
}

// A Client notifies once per interval per consumer; a call that inserts nothing does not use the turn.
func TestNotifyDebounce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	c, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: time.Hour}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: -1}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, db)
	if _, err := quiet.Receive(ctx, ledgertest.Message("old", `{}`)); err != nil {
		t.Fatal(err)
	}
	receive := func(key string) {
		t.Helper()
		if _, err := c.Receive(ctx, ledgertest.Message(key, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	receive("old") // a duplicate: nothing notified, turn kept
	receive("a")   // notifies
	receive("b")   // within the hour: debounced
	other := ledgertest.Message("c", `{}`)
	other.Consumer = "billing"
	if _, err := c.Receive(ctx, other); err != nil { // another consumer has its own turn
		t.Fatal(err)
	}
	if got := l.received(t); strings.Join(got, ",") != "ledger,billing" {
		t.Fatalf("notified %q, want ledger then billing", got)
	}
}

func TestNotifyChannelFitsPostgres(t *testing.T) {
	t.Parallel()
	if ch := (txinbox.Store{Schema: "public"}).NotifyChannel(); ch != "txinbox_public" {
		t.Fatalf("channel %q", ch)
	}
	long := strings.Repeat("s", 63)
	ch := (txinbox.Store{Schema: long}).NotifyChannel()
	if len(ch) > 63 || ch == (txinbox.Store{Schema: long[:62] + "t"}).NotifyChannel() {
		t.Fatalf("channel %q (%d bytes)", ch, len(ch))
	}
	// PostgreSQL accepts it as is (LISTEN would truncate, pg_notify would reject, a longer name).
	db := testdb.New(t)
	if _, err := db.Pool.Exec(context.Background(), "SELECT pg_notify($1, 'x')", ch); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReceiveNotify measures single-message receives (one transaction each) from 16 goroutines
// with no notifications, one per receive, and the default debounce.
func BenchmarkReceiveNotify(b *testing.B) {
	for _, c := range []struct {
		name     string
		interval time.Duration
	}{{"none", -1}, {"every", time.Nanosecond}, {"debounced", 0}} {
		b.Run(c.name, func(b *testing.B) {
			db := testdb.New(b)
			cl, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: c.interval}, inbox.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(8) // x GOMAXPROCS (2) = 16 goroutines
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cl.Receive(context.Background(), ledgertest.Message(fmt.Sprint("k", n.Add(1)), `{"amount":1}`)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
