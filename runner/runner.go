// Package runner runs a service's txinbox background work in one process: its worker pools (package
// worker), its outbox relays (package outbox) and the schema's maintainer candidate (package
// maintain), started and stopped as one [txinbox.Service].
//
// Make one Runner per process and schema, from the service's Store:
//
//	r, err := runner.New(store, runner.Config{
//		Pools:  []worker.Config{{Consumer: "billing", Handlers: handlers}},
//		Relays: []outbox.RelayConfig{{Publisher: publisher}},
//	})
//	err = r.Start(ctx)
//	...
//	err = r.Stop(stopCtx)
//
// Every Runner runs exactly one maintainer candidate for its schema, whatever it runs besides (pools
// only, relays only, both, or nothing else): among all the candidates of the schema, in every
// process, one is elected, and it alone rotates the inbox's and the outbox's generations, deletes
// expired idempotency keys, runs the vacuum and statistics safety nets and the health warnings, and
// folds the console's roll-ups. So any service made with a Runner keeps its tables bounded with no
// extra line.
package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/txinbox/txinbox/internal/owner"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/worker"
)

// Config configures a Runner. The zero value is valid: a Runner of the maintainer alone.
type Config struct {
	// Pools are the worker pools to run, one per consumer (two pools of one consumer are a
	// *txinbox.ConfigError).
	Pools []worker.Config
	// Relays are the outbox relays to run; a service usually runs one.
	Relays []outbox.RelayConfig
	// Maintenance configures the schema's maintainer candidate (see package maintain). Give every
	// Runner of the schema the same Maintenance: the leader's decides.
	Maintenance maintain.Config
	// Owner names this process in the claims, the batches and the maintainer's lease: it is the
	// Owner of every pool, relay and maintainer whose Config sets none. Default: hostname:pid:random.
	Owner string
}

// Runner runs pools, relays and one maintainer candidate as one service. Make it with [New].
type Runner struct {
	pools  []*worker.Pool
	byName map[string]*worker.Pool // by consumer
	relays []*outbox.Relay
	maint  *maintain.Maintainer

	mu      sync.Mutex
	started []txinbox.Service // in start order
}

var _ txinbox.Service = (*Runner)(nil)

// New checks cfg and makes the pools, the relays and the maintainer of store (each constructor's
// checks apply: a *txinbox.ConfigError whose Field names the entry, such as "Pools[1].Consumer"). It
// does not touch the database; Start does.
func New(store txinbox.Store, cfg Config) (*Runner, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	if cfg.Owner == "" {
		cfg.Owner = owner.New()
	}
	r := &Runner{byName: map[string]*worker.Pool{}}
	seen := map[string]bool{}
	for i, pc := range cfg.Pools {
		if seen[pc.Consumer] && pc.Consumer != "" {
			return nil, &txinbox.ConfigError{Field: fmt.Sprintf("Pools[%d].Consumer", i),
				Reason: fmt.Sprintf("%q has a pool already: one pool per consumer (raise its Concurrency instead)", pc.Consumer)}
		}
		seen[pc.Consumer] = true
		if pc.Owner == "" {
			pc.Owner = cfg.Owner
		}
		p, err := worker.New(store, pc)
		if err != nil {
			return nil, entry(err, fmt.Sprintf("Pools[%d]", i))
		}
		r.pools = append(r.pools, p)
		r.byName[pc.Consumer] = p
	}
	for i, rc := range cfg.Relays {
		if rc.Owner == "" {
			rc.Owner = cfg.Owner
		}
		rl, err := outbox.NewRelay(store, rc)
		if err != nil {
			return nil, entry(err, fmt.Sprintf("Relays[%d]", i))
		}
		r.relays = append(r.relays, rl)
	}
	mc := cfg.Maintenance
	if mc.Owner == "" {
		mc.Owner = cfg.Owner
	}
	if r.maint, err = maintain.New(store, mc); err != nil {
		return nil, entry(err, "Maintenance")
	}
	return r, nil
}

// entry prefixes the Field of a *txinbox.ConfigError of an entry's own configuration with the
// entry's name (a Store's error is the Store's).
func entry(err error, name string) error {
	var ce *txinbox.ConfigError
	if errors.As(err, &ce) && !strings.HasPrefix(ce.Field, "Store.") {
		ce.Field = name + "." + ce.Field
	}
	return err
}

// Pool returns the pool of consumer, or nil if the Runner runs none.
func (r *Runner) Pool(consumer string) *worker.Pool { return r.byName[consumer] }

// Relays returns the relays, in the order of Config.Relays.
func (r *Runner) Relays() []*outbox.Relay { return r.relays }

// Maintainer returns the schema's maintainer candidate the Runner runs.
func (r *Runner) Maintainer() *maintain.Maintainer { return r.maint }

// Start starts the maintainer, then the pools and the relays, and returns once all run (see each
// Start: an error matching txinbox.ErrNotMigrated when the schema lacks their tables). If one fails
// to start, the ones started are stopped (bounded by ctx) and its error returned. ctx bounds the
// Runner's life as it bounds each one's: pass a ctx that outlives a SIGTERM, and call Stop with a
// deadline, to let the work in flight finish.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started != nil {
		return errors.New("txinbox: runner already started")
	}
	all := []txinbox.Service{r.maint}
	for _, p := range r.pools {
		all = append(all, p)
	}
	for _, rl := range r.relays {
		all = append(all, rl)
	}
	for _, s := range all {
		if err := s.Start(ctx); err != nil {
			// Stop what did start; a failure to stop is reported with the start's error.
			stopErr := stopAll(context.WithoutCancel(ctx), r.started)
			r.started = nil
			return errors.Join(err, stopErr)
		}
		r.started = append(r.started, s)
	}
	return nil
}

// Stop stops the pools and the relays at once, each letting its work in flight finish until ctx
// ends (see their Stop), then the maintainer, and returns their errors joined (nil if all stopped in
// time). Stop before Start returns nil.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if len(started) == 0 {
		return nil
	}
	// started[0] is the maintainer: it stops last, so that it leads while the others finish.
	err := stopAll(ctx, started[1:])
	return errors.Join(err, started[0].Stop(ctx))
}

// stopAll stops ss at once and returns their errors joined.
func stopAll(ctx context.Context, ss []txinbox.Service) error {
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() { errs[i] = s.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
