package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func run(t *testing.T, r *runner.Runner) {
	t.Helper()
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

func noopHandlers() *worker.Handlers {
	hs := worker.NewHandlers()
	worker.Handle(hs, "noop", func(context.Context, pgx.Tx, *worker.Message[json.RawMessage]) error { return nil })
	return hs
}

// A program that runs nothing but an outbox relay is maintained: its Runner's maintainer rotates the
// outbox (sent events leave after the OutboxWindow) and deletes expired idempotency keys, with no
// line of the program's about maintenance.
func TestRelayOnlyProgramIsMaintained(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	store := db.Store()
	store.Retention = time.Second // generations of a second: rotations come fast
	ctx := context.Background()
	client, err := outbox.New(store, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Publish(ctx, tx, outbox.Message{Topic: "t", Payload: []byte(`{}`)}, outbox.Message{Topic: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`INSERT INTO {schema}.idempotency_keys (principal, method, route, key, fingerprint,
		state, status, locked_until, expires_at) VALUES ('alice', 'POST', '/transfers', 'k', '\x00', 'completed', 201, now(), now() - interval '1 minute')`)); err != nil {
		t.Fatal(err)
	}
	pub := outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil })
	r, err := runner.New(store, runner.Config{
		Relays:      []outbox.RelayConfig{{Publisher: pub, PollInterval: 20 * time.Millisecond}},
		Maintenance: maintain.Config{Lease: time.Second, OutboxWindow: time.Millisecond, Generation: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	waitFor(t, "the expired idempotency key deleted", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.idempotency_keys`) == 0
	})
	waitFor(t, "the sent events rotated out of the outbox", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.outbox`) == 0
	})
	if g := db.Count(t, `SELECT gen FROM {schema}.outbox_ring`); g < 2 {
		t.Errorf("outbox generation %d, want at least 2 (two rotations retire the first generation)", g)
	}
}

// One Runner runs one maintainer candidate however many pools and relays it runs: two Runners of
// three pools and two relays each, on one schema, make two candidates, one of which leads; each
// candidate is named by its Runner's Owner.
func TestOneMaintainerCandidatePerRunner(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	pub := outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil })
	var rs []*runner.Runner
	for _, owner := range []string{"process-1", "process-2"} {
		cfg := runner.Config{Owner: owner, Maintenance: maintain.Config{Lease: time.Second}}
		for _, c := range []string{"a", "b", "c"} {
			cfg.Pools = append(cfg.Pools, worker.Config{Consumer: c, Handlers: noopHandlers()})
		}
		for range 2 {
			cfg.Relays = append(cfg.Relays, outbox.RelayConfig{Publisher: pub})
		}
		r, err := runner.New(db.Store(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Maintainer().Owner(); got != owner {
			t.Errorf("maintainer owner %q, want the runner's %q", got, owner)
		}
		if r.Pool("b") == nil || r.Pool("d") != nil || len(r.Relays()) != 2 {
			t.Errorf("pools and relays: Pool(b) %v, Pool(d) %v, %d relays", r.Pool("b"), r.Pool("d"), len(r.Relays()))
		}
		run(t, r)
		rs = append(rs, r)
	}
	waitFor(t, "one leader", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.inbox_leader WHERE expires_at > now()`) == 1
	})
	leading := 0
	for _, r := range rs {
		if ok, _ := r.Maintainer().Leading(); ok {
			leading++
		}
	}
	if leading != 1 {
		t.Errorf("%d runners' maintainers lead, want 1", leading)
	}
	// Every maintainer that ever took the lease is one of the two runners': no pool or relay ran one.
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox_leader WHERE owner NOT IN ('process-1', 'process-2')`); n != 0 {
		t.Errorf("%d leases held by owners other than the runners'", n)
	}
}

// Bad configurations are *txinbox.ConfigError naming the entry: two pools of one consumer, and an
// entry's own error prefixed with the entry.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	pub := outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil })
	for field, cfg := range map[string]runner.Config{
		"Pools[1].Consumer":   {Pools: []worker.Config{{Consumer: "a", Handlers: noopHandlers()}, {Consumer: "a", Handlers: noopHandlers()}}},
		"Pools[0].Handlers":   {Pools: []worker.Config{{Consumer: "a"}}},
		"Relays[0].Publisher": {Relays: []outbox.RelayConfig{{}}},
		"Relays[1].BatchSize": {Relays: []outbox.RelayConfig{{Publisher: pub}, {Publisher: pub, BatchSize: -1}}},
		"Maintenance.Lease":   {Maintenance: maintain.Config{Lease: time.Millisecond}},
	} {
		_, err := runner.New(db.Store(), cfg)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: err = %v, want a *txinbox.ConfigError of that field", field, err)
		}
	}
	if _, err := runner.New(txinbox.Store{}, runner.Config{}); !errors.Is(err, txinbox.ErrInvalidConfig) {
		t.Errorf("no DB: %v", err)
	}
}
