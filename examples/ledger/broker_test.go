package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/examples/ledger/internal/api"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// brokerPlan is a stream of OrderPaid events to publish: every event once, and 30% of them a second
// time (same id, same body), shuffled. How an event carries its id varies with its index: the
// broker's message id (AMQP message-id, Nats-Msg-Id), the x-idempotency-key header, or only the
// event_id of its body.
type brokerPlan struct {
	events []planned
	sends  []int // indexes into events, in publishing order
	want   map[string]int64
	copies int // events sent twice
}

type planned struct {
	id, account string
	amount      int64
	body        []byte
}

// keyVia says how event i carries its key.
const (
	viaMessageID = iota
	viaHeader
	viaBody
)

func via(i int) int { return i % 3 }

func newBrokerPlan(n int) *brokerPlan {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	p := &brokerPlan{want: map[string]int64{}}
	tag := fmt.Sprintf("%08x", rng.Uint32())
	for i := range n {
		e := planned{id: fmt.Sprintf("evt-%s-%04d", tag, i), account: fmt.Sprintf("acct-%s-%02d", tag, i%17), amount: 1 + rng.Int64N(100_000)}
		e.body = []byte(event(e.id, e.account, e.amount))
		p.events = append(p.events, e)
		p.want[e.account] += e.amount
		p.sends = append(p.sends, i)
		if rng.Float64() < 0.3 {
			p.sends = append(p.sends, i)
			p.copies++
		}
	}
	rng.Shuffle(len(p.sends), func(i, j int) { p.sends[i], p.sends[j] = p.sends[j], p.sends[i] })
	return p
}

// check asserts that every event was credited exactly once, to the right account, with its amount,
// that every message is completed, and that every balance is exact (and the sum of its entries).
// "Exactly once" is checked where a double processing would show, not only in the ledger, whose
// UNIQUE event_id absorbs a second credit (Apply then reports AlreadyApplied): every completed
// message's stored result (ledger.Applied) names its event's entry and is not AlreadyApplied, and the
// handler never logged that an event already had an entry (log is the command's stderr).
func (p *brokerPlan) check(t *testing.T, db *testdb.DB, log string) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, db.SQL(`SELECT event_id, account_id, amount_cents FROM {schema}.ledger_entries`))
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		account string
		amount  int64
	}
	got := map[string]entry{}
	for rows.Next() {
		var id string
		var e entry
		if err := rows.Scan(&id, &e.account, &e.amount); err != nil {
			t.Fatal(err)
		}
		got[id] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(p.events) {
		t.Errorf("%d events credited, want %d", len(got), len(p.events))
	}
	for _, e := range p.events {
		g, ok := got[e.id]
		if !ok || g.account != e.account || g.amount != e.amount {
			t.Errorf("event %s: credited %+v (found %v), want once to %s for %d", e.id, g, ok, e.account, e.amount)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox m JOIN {schema}.ledger_entries e ON e.event_id = m.key
		WHERE m.consumer = 'ledger' AND m.kind = 'OrderPaid' AND m.state = 'completed'
		AND (m.result->>'entry_id')::bigint = e.id AND NOT coalesce((m.result->>'already_applied')::boolean, false)`); n != int64(len(p.events)) {
		t.Errorf("%d completed OrderPaid messages whose result is their event's own entry, want %d", n, len(p.events))
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE coalesce((result->>'already_applied')::boolean, false)`); n != 0 {
		t.Errorf("%d messages applied to an event that already had an entry (processed twice)", n)
	}
	if strings.Contains(log, "event already has an entry") {
		t.Errorf("the handler met an event that already had an entry:\n%s", log)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'ledger' AND kind = 'OrderPaid' AND state = 'completed'`); n != int64(len(p.events)) {
		t.Errorf("%d completed OrderPaid messages in the inbox, want %d", n, len(p.events))
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state <> 'completed'`); n != 0 {
		t.Errorf("%d messages not completed (dead or pending)", n)
	}
	balances := (&env{DB: db}).balances(t) // also checks every balance against the sum of its entries
	if fmt.Sprint(balances) != fmt.Sprint(p.want) {
		t.Errorf("balances = %v\nwant       %v", balances, p.want)
	}
	l, err := ledger.New(db.Store())
	if err != nil {
		t.Fatal(err)
	}
	for account, want := range p.want {
		a, _, err := l.Account(ctx, db.Pool, account, 0)
		if err != nil || a.BalanceCents != want {
			t.Errorf("ledger.Account(%s) = %d, %v; want %d", account, a.BalanceCents, err, want)
		}
	}
}

// migrated returns a schema with the ledger's tables (so the test can count in it while the
// command, which migrates it again, runs).
func migrated(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	if err := ledger.Migrate(context.Background(), db.Pool.Config().ConnConfig, db.Schema); err != nil {
		t.Fatal(err)
	}
	return db
}

var stoppedRE = regexp.MustCompile(`msg="ledger: stopped consuming" broker=(\w+) records=(\d+) inserted=(\d+) duplicates=(\d+)`)

// TestWorkConsumesRabbitMQ publishes OrderPaid events to a fresh queue (30% of them twice) and runs
// `ledger work` on it: every event is credited exactly once.
func TestWorkConsumesRabbitMQ(t *testing.T) {
	t.Parallel()
	amqpURL := brokerURL(t, "RabbitMQ", "TXINBOX_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	db := migrated(t)
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := "ledger_test_" + db.Schema
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil { // as --amqp-declare does
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDelete(queue, false, false, false)
		}
		if err != nil {
			t.Errorf("delete queue %s: %v", queue, err)
		}
	})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	p := newBrokerPlan(300)
	ctx := context.Background()
	var confirms []*amqp.DeferredConfirmation
	for _, i := range p.sends {
		e := p.events[i]
		msg := amqp.Publishing{ContentType: "application/json", Body: e.body, DeliveryMode: amqp.Persistent}
		switch via(i) {
		case viaMessageID:
			msg.MessageId, msg.Type = e.id, ledger.KindOrderPaid
		case viaHeader:
			msg.Headers = amqp.Table{adapters.IdempotencyKeyHeader: e.id}
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
		if err != nil {
			t.Fatal(err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}

	cmd := startCommand(t, "work", "--database-url", db.URL, "--schema", db.Schema, "--workers", "2", "--poll", "20ms",
		"--amqp-url", amqpURL, "--amqp-queue", queue)
	waitFor(t, "every event credited", func() bool {
		select {
		case <-cmd.done:
			t.Fatalf("work exited with status %d:\n%s", cmd.code, cmd.stderr.String())
		default:
		}
		return db.Count(t, `SELECT count(*) FROM {schema}.ledger_entries`) == int64(len(p.events)) &&
			db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0
	})
	if code := cmd.stop(); code != 0 {
		t.Fatalf("work exited with status %d:\n%s", code, cmd.stderr.String())
	}
	p.check(t, db, cmd.stderr.String())

	// Every publication was stored once (inserted) or recognised as a copy (duplicate), or, if work
	// stopped before it was delivered, is still in the queue.
	m := stoppedRE.FindStringSubmatch(cmd.stderr.String())
	if m == nil {
		t.Fatalf("no consumer statistics in the log:\n%s", cmd.stderr.String())
	}
	inserted, _ := strconv.Atoi(m[3])
	duplicates, _ := strconv.Atoi(m[4])
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if inserted != len(p.events) || duplicates+q.Messages < p.copies {
		t.Fatalf("inserted %d (want %d), duplicates %d + %d left in the queue (want at least %d copies)",
			inserted, len(p.events), duplicates, q.Messages, p.copies)
	}
	t.Logf("%d events, %d sent twice: %d inserted, %d recognised as duplicates, %d copies left in the queue", len(p.events), p.copies, inserted, duplicates, q.Messages)
}

// TestServeConsumesNATS publishes OrderPaid events to a fresh JetStream stream (30% of them twice)
// and runs `ledger serve` on it: every event is credited exactly once, the API reports the balances,
// and /metrics counts the broker messages.
func TestServeConsumesNATS(t *testing.T) {
	t.Parallel()
	natsURL := brokerURL(t, "NATS", "TXINBOX_TEST_NATS_URL", "nats://127.0.0.1:4222")
	db := migrated(t)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := strings.ToUpper("ledger_test_" + db.Schema)
	subject := stream + ".order_paid"
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := js.DeleteStream(context.Background(), stream); err != nil {
			t.Errorf("delete stream %s: %v", stream, err)
		}
	})
	p := newBrokerPlan(300)
	stored := 0 // messages JetStream kept: it drops a second Nats-Msg-Id itself (its duplicate window)
	for _, i := range p.sends {
		e := p.events[i]
		msg := nats.NewMsg(subject)
		msg.Data = e.body
		switch via(i) {
		case viaMessageID:
			msg.Header.Set(jetstream.MsgIDHeader, e.id)
		case viaHeader:
			msg.Header.Set(adapters.IdempotencyKeyHeader, e.id)
			msg.Header.Set("x-kind", ledger.KindOrderPaid)
		}
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			stored++
		}
	}

	cmd := startCommand(t, "serve", "--addr", "127.0.0.1:0", "--database-url", db.URL, "--schema", db.Schema,
		"--workers", "2", "--poll", "20ms", "--nats-url", natsURL, "--nats-stream", stream, "--nats-subject", subject,
		"--nats-durable", "ledger_test")
	base := "http://" + cmd.waitServing(t)
	inserted := `ledger_broker_records_total{broker="nats",outcome="inserted"}`
	duplicate := `ledger_broker_records_total{broker="nats",outcome="duplicate"}`
	waitFor(t, "every event credited and every message stored", func() bool {
		m := scrape(t, base)
		return m[inserted]+m[duplicate] >= float64(stored) &&
			db.Count(t, `SELECT count(*) FROM {schema}.ledger_entries`) == int64(len(p.events)) &&
			db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0
	})
	m := scrape(t, base)
	if m[inserted] != float64(len(p.events)) || m[duplicate] < float64(stored-len(p.events)) {
		t.Errorf("/metrics: %v inserted (want %d), %v duplicates (want at least %d)", m[inserted], len(p.events), m[duplicate], stored-len(p.events))
	}
	for account, want := range p.want {
		r := call(t, "GET", base+"/v1/accounts/"+account+"?limit=0", "")
		var a api.AccountResponse
		r.json(t, &a)
		if r.status != 200 || a.BalanceCents != want {
			t.Errorf("GET /v1/accounts/%s: %d %s, want balance %d", account, r.status, r.body, want)
		}
	}
	if code := cmd.stop(); code != 0 {
		t.Fatalf("serve exited with status %d:\n%s", code, cmd.stderr.String())
	}
	p.check(t, db, cmd.stderr.String())
	t.Logf("%d events, %d sent twice, %d kept by JetStream: %v inserted, %v duplicates", len(p.events), p.copies, stored, m[inserted], m[duplicate])
}
