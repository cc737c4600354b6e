// Package chaintest is the acceptance test of a broker adapter as the link between two services,
// each in processes of its own that are SIGKILLed and restarted while events flow.
//
// Service "orders" writes events with outbox.Client.Publish in its own transactions (the test process
// does, at a steady rate, one transaction in ten rolled back), and a relay process (outbox.Relay with
// the broker's publisher) publishes them. Service "billing" is a consumer process: the broker's
// consumer adapter stores them into its inbox (another schema), and a worker.Pool (Concurrency 4,
// batches of 8) applies them with a handler that records each event's key and sequence number in a
// table. There are 50 keys, and each key's events are numbered 1, 2, ... in the order they were
// committed. Meanwhile the relay process and the consumer process are each SIGKILLed three times, at
// random moments, and restarted at once. At the end every committed event must have been applied
// exactly once, and each key's events in order: the recorded sequence of every key is 1..N, each
// number once. A failure names, per key, the events missing, applied twice, or applied out of order.
//
// A broker package runs it with its own [Broker] (the set-up of its broker, its publisher and its
// consumer), from a test function calling [Run] and a TestMain calling [Main]: the services are the
// test binary itself, run again in a child role.
package chaintest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/worker"
)

// The shape of a run.
const (
	Keys   = 50 // keys, each with its own sequence of events
	PerKey = 30 // events per key
	Kills  = 3  // SIGKILLs of each service (relay, consumer) during a run
	// Kind is the kind of every event (outbox.Message.Kind), which the billing service's handler is
	// registered for.
	Kind = "order.placed"
	// InboxConsumer is the billing service's inbox consumer.
	InboxConsumer = "billing"
	// AckWait is a short redelivery delay for brokers that have one (a JetStream consumer's
	// AckWait): how long a message in the hands of a killed consumer stays away.
	AckWait = 2 * time.Second
)

// ParamTopic is the key of [Params] that a Broker's Setup must set: the outbox topic the orders
// service publishes to (a NATS subject, a RabbitMQ queue, a Kafka topic).
const ParamTopic = "topic"

// Params is what a Broker's Setup gives its services: names and addresses, as text (they travel to
// the child processes in their environment).
type Params map[string]string

// Consumer is what the billing service needs of a broker's consumer adapter (rabbitmq.Consumer,
// natsjs.Consumer, kafka.Consumer).
type Consumer interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Done() <-chan struct{}
}

// Broker is what a broker package gives the chain: the set-up of its broker for one run, and the
// makers of the two services' broker clients.
type Broker struct {
	// Name names the broker in logs.
	Name string
	// Setup runs in the test process before the services start: it makes the broker's resources of
	// this run (a stream and its durable consumer, a queue, a topic; cleaned up when t ends) and
	// returns what the services need to reach them, ParamTopic included.
	Setup func(t *testing.T) Params
	// Publisher runs in each relay process: it makes the orders service's outbox publisher (the
	// process runs until it is killed, so the publisher is never closed).
	Publisher func(ctx context.Context, p Params) (outbox.Publisher, error)
	// Consumer runs in each consumer process: it makes the billing service's consumer of the broker,
	// storing into sink, with batch (its sizes and retry delays).
	Consumer func(ctx context.Context, p Params, sink adapters.SinkConfig, batch adapters.BatchConfig) (Consumer, error)
}

// The environment of a child process.
const (
	envRole   = "TXINBOX_CHAIN_ROLE"   // roleRelay or roleConsumer
	envURL    = "TXINBOX_CHAIN_URL"    // the PostgreSQL server
	envSchema = "TXINBOX_CHAIN_SCHEMA" // the service's schema
	envParams = "TXINBOX_CHAIN_PARAMS" // Params, as JSON
	// EnvSeed, if set, is the seed of the run's random choices (the kill moments, the keys of each
	// transaction), to replay a run that failed: the failure message names it.
	EnvSeed = "TXINBOX_CHAIN_SEED"

	roleRelay    = "relay"
	roleConsumer = "consumer"
	readyLine    = "chaintest: ready"
)

// Main is the TestMain of a broker package whose tests call [Run]. In a child process started by Run
// it runs that service with b until it is killed; otherwise it runs the tests.
func Main(m *testing.M, b Broker) {
	switch os.Getenv(envRole) {
	case "":
		os.Exit(m.Run())
	case roleRelay:
		os.Exit(child(b, relay))
	case roleConsumer:
		os.Exit(child(b, consume))
	default:
		fmt.Fprintf(os.Stderr, "chaintest: unknown role %q\n", os.Getenv(envRole))
		os.Exit(3)
	}
}

// child runs a service: it connects to the database, starts the service with run, says it is ready
// on stdout, and waits until it is killed. It returns an exit code when the service cannot start or
// stops on its own.
func child(b Broker, run func(ctx context.Context, b Broker, p Params, store txinbox.Store) (<-chan error, error)) int {
	ctx := context.Background()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With("service", os.Getenv(envRole), "pid", os.Getpid()))
	var p Params
	if err := json.Unmarshal([]byte(os.Getenv(envParams)), &p); err != nil {
		fmt.Fprintln(os.Stderr, "chaintest: params:", err)
		return 3
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaintest:", err)
		return 3
	}
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaintest:", err)
		return 3
	}
	stopped, err := run(ctx, b, p, txinbox.Store{DB: pool, Schema: os.Getenv(envSchema)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaintest: %s: %v\n", os.Getenv(envRole), err)
		return 3
	}
	fmt.Println(readyLine)
	err = <-stopped
	fmt.Fprintf(os.Stderr, "chaintest: %s stopped on its own: %v\n", os.Getenv(envRole), err)
	return 2
}

// relay starts the orders service's relay.
func relay(ctx context.Context, b Broker, p Params, store txinbox.Store) (<-chan error, error) {
	pub, err := b.Publisher(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	r, err := outbox.NewRelay(store, outbox.RelayConfig{Publisher: pub, Source: "/orders",
		BatchSize: 16, Concurrency: 2, PollInterval: 200 * time.Millisecond,
		// A killed relay's claims hold their keys until the Lease ends.
		Lease: 4 * time.Second, Timeout: 3 * time.Second,
		MaxAttempts: 1000, Backoff: txinbox.Exponential{Base: 100 * time.Millisecond, Max: time.Second}})
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return make(chan error), nil // runs until killed
}

// event is the payload of every event: its key and its number in the key's sequence.
type event struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// SinkConfig returns the billing service's Sink configuration for store: where to store, and nothing
// about the events. Their key, kind and ordering key come with each event, in its CloudEvents
// envelope (its id, its type and its partitionkey), as every publisher sends it and every sink reads
// it by default.
func SinkConfig(store txinbox.Store) adapters.SinkConfig {
	return adapters.SinkConfig{Store: store, Consumer: InboxConsumer}
}

// consume starts the billing service: the broker's consumer into the inbox, and the worker pool
// that applies the events, recording each in the table applied.
func consume(ctx context.Context, b Broker, p Params, store txinbox.Store) (<-chan error, error) {
	c, err := b.Consumer(ctx, p, SinkConfig(store), adapters.BatchConfig{BatchSize: 20,
		RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	insert := "INSERT INTO " + pgx.Identifier{store.Schema, "applied"}.Sanitize() + " (key, seq, event_id) VALUES ($1, $2, $3)"
	hs := worker.NewHandlers()
	worker.Handle(hs, Kind, func(ctx context.Context, tx pgx.Tx, m *worker.Message[event]) error {
		_, err := tx.Exec(ctx, insert, m.Payload.Key, m.Payload.Seq, m.Key)
		return err
	})
	pool, err := worker.New(store, worker.Config{Consumer: InboxConsumer, Handlers: hs, Concurrency: 4, BatchSize: 8,
		PollInterval: 200 * time.Millisecond, MaxAttempts: 50})
	if err != nil {
		return nil, err
	}
	if err := pool.Start(ctx); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	stopped := make(chan error, 1)
	go func() {
		<-c.Done()
		stopped <- c.Stop(ctx)
	}()
	return stopped, nil
}

// service is a child process of the test, started again after each kill.
type service struct {
	role string
	env  []string
	logs *logBuffer

	mu     sync.Mutex
	cur    *process // the process running, nil before the first start
	starts int
}

// process is one process of a service.
type process struct {
	cmd    *exec.Cmd
	eof    chan struct{} // closed when its stdout ended (it exited)
	killed atomic.Bool   // the test is killing it
}

// start starts the service's process and waits until it says it is ready. If it exits first, or
// exits later without being killed, dead receives an error.
func (s *service) start(dead chan<- error) error {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stderr = s.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, eof: make(chan struct{})}
	s.mu.Lock()
	s.cur = p
	s.starts++
	n := s.starts
	s.mu.Unlock()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == readyLine {
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(p.eof)
		if !p.killed.Load() {
			_ = cmd.Wait()
			dead <- fmt.Errorf("the %s process (start %d) exited on its own: %v", s.role, n, cmd.ProcessState)
		}
	}()
	select {
	case <-ready:
		return nil
	case <-p.eof:
		return fmt.Errorf("the %s process (start %d) exited before it was ready", s.role, n)
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("the %s process (start %d) was not ready after 2 minutes", s.role, n)
	}
}

// kill SIGKILLs the service's process and waits until it is gone.
func (s *service) kill() {
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	if p == nil || p.killed.Swap(true) {
		return
	}
	_ = p.cmd.Process.Kill() // SIGKILL
	<-p.eof
	_ = p.cmd.Wait()
}

// logBuffer keeps what the services write on stderr, for a failure message.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// tail returns the last n bytes written.
func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// Run runs the chain of b (see the package documentation) and fails t unless every committed event
// was applied exactly once, each key's events in order.
func Run(t *testing.T, b Broker) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(EnvSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", EnvSeed, err)
		}
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	replay := fmt.Sprintf("%s=%d", EnvSeed, seed)
	orders, billing := adaptertest.NewDB(t), adaptertest.NewDB(t)
	ctx := context.Background()
	if _, err := billing.Pool.Exec(ctx, billing.SQL(`CREATE TABLE {schema}.applied (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, seq int NOT NULL, event_id text NOT NULL)`)); err != nil {
		t.Fatal(err)
	}
	params := b.Setup(t)
	topic := params[ParamTopic]
	if topic == "" {
		t.Fatalf("%s: Setup returned no %q", b.Name, ParamTopic)
	}
	pj, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}

	logs := &logBuffer{}
	dead := make(chan error, 2*(Kills+1))
	services := map[string]*service{}
	for _, s := range []struct{ role, schema string }{{roleRelay, orders.Schema}, {roleConsumer, billing.Schema}} {
		services[s.role] = &service{role: s.role, logs: logs,
			env: []string{envRole + "=" + s.role, envURL + "=" + orders.URL, envSchema + "=" + s.schema, envParams + "=" + string(pj)}}
	}
	t.Cleanup(func() {
		for _, s := range services {
			s.kill()
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s chain (%s): %s\nthe services' logs (end):\n%s", b.Name, replay, fmt.Sprintf(format, args...), logs.tail(8000))
	}
	for _, role := range []string{roleConsumer, roleRelay} {
		if err := services[role].start(dead); err != nil {
			fail("%v", err)
		}
	}

	t0 := time.Now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 3)
	var committed int
	prng := rand.New(rand.NewPCG(rng.Uint64(), 1))
	go func() {
		n, err := produce(pctx, orders, topic, prng)
		committed = n
		results <- result{"producer", err}
	}()
	for _, role := range []string{roleRelay, roleConsumer} {
		r := rand.New(rand.NewPCG(rng.Uint64(), 2))
		go func() { results <- result{role + " killer", killer(pctx, services[role], r, dead)} }()
	}
	for range 3 {
		select {
		case r := <-results:
			if r.err != nil {
				fail("%s: %v", r.name, r.err)
			}
		case err := <-dead:
			fail("%v", err)
		}
	}
	t.Logf("%s: %d events committed in %v; relay and consumer each killed %d times; waiting for the rest",
		b.Name, committed, time.Since(t0).Round(time.Millisecond), Kills)

	total := int64(Keys * PerKey)
	if int64(committed) != total {
		fail("%d events committed, want %d", committed, total)
	}
	if err := waitDone(orders, billing, total, dead); err != nil {
		fail("%v", err)
	}
	t.Logf("%s: every event applied %v after the start", b.Name, time.Since(t0).Round(time.Millisecond))
	for _, s := range services {
		s.kill()
	}
	if problems, bad := verify(t, orders, billing); len(problems) > 0 {
		fail("%d problems:\n%s\n%s", len(problems), strings.Join(problems, "\n"), trace(t, orders, billing, bad))
	}
	t.Logf("%s: %s", b.Name, summary(t, orders, billing))
}

// produce commits the orders service's events: Keys keys, PerKey events each, numbered per key in
// commit order, a few keys per transaction, one transaction every 20ms, and one transaction in ten
// rolled back (its numbers are used again). It returns the number of events committed.
func produce(ctx context.Context, orders *adaptertest.DB, topic string, rng *rand.Rand) (int, error) {
	client, err := outbox.New(orders.Store(), outbox.Config{})
	if err != nil {
		return 0, err
	}
	next := make([]int, Keys) // the last committed number of each key
	committed := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for committed < Keys*PerKey {
		select {
		case <-ctx.Done():
			return committed, ctx.Err()
		case <-tick.C:
		}
		var open []int
		for k, n := range next {
			if n < PerKey {
				open = append(open, k)
			}
		}
		rng.Shuffle(len(open), func(i, j int) { open[i], open[j] = open[j], open[i] })
		open = open[:min(len(open), 1+rng.IntN(3))]
		msgs := make([]outbox.Message, len(open))
		for i, k := range open {
			payload, err := json.Marshal(event{Key: key(k), Seq: next[k] + 1})
			if err != nil {
				return committed, err
			}
			msgs[i] = outbox.Message{Topic: topic, Key: key(k), Kind: Kind, Payload: payload}
		}
		rollback := rng.IntN(10) == 0
		err := pgx.BeginFunc(ctx, orders.Pool, func(tx pgx.Tx) error {
			if _, err := client.Publish(ctx, tx, msgs...); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		switch {
		case rollback && errors.Is(err, errRollback):
		case err != nil:
			return committed, err
		default:
			for _, k := range open {
				next[k]++
			}
			committed += len(open)
		}
	}
	return committed, nil
}

var errRollback = errors.New("rolled back on purpose")

func key(k int) string { return fmt.Sprintf("k%02d", k) }

// killer SIGKILLs s Kills times, each at a random moment 0.5 to 3 seconds after it was ready, and
// starts it again at once.
func killer(ctx context.Context, s *service, rng *rand.Rand, dead chan<- error) error {
	for range Kills {
		d := 500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		s.kill()
		if err := s.start(dead); err != nil {
			return err
		}
	}
	return nil
}

// waitDone waits until the relay recorded every event's outcome and total events are applied, as
// long as things keep moving: it gives up after two minutes without progress (not a timing
// assertion: only a bound on a run that hangs).
func waitDone(orders, billing *adaptertest.DB, total int64, dead <-chan error) error {
	ctx := context.Background()
	var last [2]int64
	lastMove := time.Now()
	for {
		var now [2]int64
		if err := billing.Pool.QueryRow(ctx, billing.SQL(`SELECT count(*) FROM {schema}.applied`)).Scan(&now[0]); err != nil {
			return err
		}
		if err := orders.Pool.QueryRow(ctx, orders.SQL(`SELECT count(*) FROM {schema}.outbox WHERE state <> 'pending'`)).Scan(&now[1]); err != nil {
			return err
		}
		if now[0] >= total && now[1] >= total {
			return nil
		}
		var deadN int64
		var deadErr *string
		if err := billing.Pool.QueryRow(ctx, billing.SQL(`SELECT count(*), min(last_error) FROM {schema}.inbox
			WHERE consumer = $1 AND state = 'dead'`), InboxConsumer).Scan(&deadN, &deadErr); err != nil {
			return err
		}
		if deadN > 0 {
			return fmt.Errorf("%d billing messages are dead, never to be applied (one's last error: %s)", deadN, *deadErr)
		}
		if now != last {
			last, lastMove = now, time.Now()
		}
		if time.Since(lastMove) > 2*time.Minute {
			return fmt.Errorf("stuck for 2 minutes at %d of %d events applied, %d recorded sent or dead by the relay", now[0], total, now[1])
		}
		select {
		case err := <-dead:
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// verify checks the end state: every committed event sent by the relay and none dead; the billing
// inbox holding each once, completed; and the applied table holding, per key, 1..PerKey in order,
// each once. It returns what is wrong, one line each, and the first key found wrong ("" if none).
func verify(t *testing.T, orders, billing *adaptertest.DB) (problems []string, bad string) {
	t.Helper()
	total := int64(Keys * PerKey)
	if n := orders.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE state = 'sent'`); n != total {
		problems = append(problems, fmt.Sprintf("the relay sent %d events, want %d (dead: %d)", n, total,
			orders.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE state = 'dead'`)))
	}
	if n := billing.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1`, InboxConsumer); n != total {
		problems = append(problems, fmt.Sprintf("the billing inbox holds %d messages, want %d", n, total))
	}
	if n := billing.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1 AND state <> 'completed'`, InboxConsumer); n != 0 {
		problems = append(problems, fmt.Sprintf("%d billing messages are not completed (dead: %d)", n,
			billing.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1 AND state = 'dead'`, InboxConsumer)))
	}
	rows, err := billing.Pool.Query(context.Background(), billing.SQL(`SELECT key, seq FROM {schema}.applied ORDER BY id`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int{}
	for rows.Next() {
		var k string
		var seq int
		if err := rows.Scan(&k, &seq); err != nil {
			t.Fatal(err)
		}
		got[k] = append(got[k], seq)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range Keys {
		if p := checkSequence(key(k), got[key(k)]); p != "" {
			problems = append(problems, p)
			if bad == "" {
				bad = key(k)
			}
		}
		delete(got, key(k))
	}
	for k, seqs := range got {
		problems = append(problems, fmt.Sprintf("key %s: applied %v, but no such key was published", k, seqs))
	}
	return problems, bad
}

// trace returns the road of key's events, for a failure message: their order in the outbox (with
// their attempts and when each was recorded sent), in the billing inbox (the order they were stored
// in, with their attempts and when each completed), and in the applied table.
func trace(t *testing.T, orders, billing *adaptertest.DB, key string) string {
	t.Helper()
	if key == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the events of key %s:\n", key)
	dump := func(title string, db *adaptertest.DB, query string) {
		fmt.Fprintf(&b, "  %s:\n", title)
		rows, err := db.Pool.Query(context.Background(), db.SQL(query), key)
		if err != nil {
			fmt.Fprintf(&b, "    %v\n", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, "    %v\n", err)
				return
			}
			fmt.Fprintf(&b, "   ")
			for i, v := range vals {
				if ts, ok := v.(time.Time); ok {
					v = ts.Format("15:04:05.000")
				}
				fmt.Fprintf(&b, " %s=%v", rows.FieldDescriptions()[i].Name, v)
			}
			fmt.Fprintln(&b)
		}
	}
	dump("outbox, in id order", orders, `SELECT id, payload::jsonb->>'seq' AS seq, event_id::text, attempts_started, finished_at
		FROM {schema}.outbox WHERE key = $1 ORDER BY id`)
	dump("billing inbox, in the order stored", billing, `SELECT id, payload->>'seq' AS seq, key AS event_id, ordering_key, received_at,
		attempts_started, completed_at FROM {schema}.inbox WHERE payload->>'key' = $1 ORDER BY id`)
	dump("applied, in order", billing, `SELECT id, seq, event_id FROM {schema}.applied WHERE key = $1 ORDER BY id`)
	return b.String()
}

// checkSequence returns what is wrong with the sequence applied for key (in the order applied), or
// "" when it is 1..PerKey: the numbers missing, those applied more than once, and the first applied
// out of order.
func checkSequence(key string, seqs []int) string {
	counts := map[int]int{}
	for _, s := range seqs {
		counts[s]++
	}
	var missing, twice []int
	for s := 1; s <= PerKey; s++ {
		switch counts[s] {
		case 0:
			missing = append(missing, s)
		case 1:
		default:
			twice = append(twice, s)
		}
	}
	var wrong []string
	if len(missing) > 0 {
		wrong = append(wrong, fmt.Sprintf("missing %v", missing))
	}
	if len(twice) > 0 {
		wrong = append(wrong, fmt.Sprintf("applied more than once %v", twice))
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			wrong = append(wrong, fmt.Sprintf("out of order: %d applied after %d", seqs[i], seqs[i-1]))
			break
		}
	}
	for s := range counts {
		if s < 1 || s > PerKey {
			wrong = append(wrong, fmt.Sprintf("unknown number %d", s))
		}
	}
	if len(wrong) == 0 {
		return ""
	}
	return fmt.Sprintf("key %s: %s (applied in this order: %v)", key, strings.Join(wrong, "; "), seqs)
}

// summary says how hard the run was: events sent more than once by the relays, and messages whose
// handling was cut by a kill.
func summary(t *testing.T, orders, billing *adaptertest.DB) string {
	t.Helper()
	resent := orders.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE attempts_started > 1`)
	retried := billing.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1 AND attempts_started > 1`, InboxConsumer)
	return fmt.Sprintf("%d keys × %d events applied exactly once, in order; %d events handed to a publisher more than once, %d messages handled again after a kill",
		Keys, PerKey, resent, retried)
}
