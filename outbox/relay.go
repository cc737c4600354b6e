package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txinbox/txinbox/internal/owner"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/engine"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/typednil"
)

// Defaults of RelayConfig (documented on its fields).
const (
	defaultBatchSize    = 100
	defaultConcurrency  = 2
	defaultPollInterval = time.Second
	defaultLease        = time.Minute
	defaultTimeout      = 30 * time.Second
	defaultMaxAttempts  = 10
)

// RelayConfig configures a Relay. Publisher is required; every other zero field takes the documented
// default.
type RelayConfig struct {
	// Publisher sends the events (see [Publisher]). Required; a nil pointer of a publisher's type
	// (a (*natsjs.Publisher)(nil), which is not a nil Publisher) is refused as well. Every interface
	// field of RelayConfig is checked so: one that holds a nil pointer, func, map or chan is a
	// *[txinbox.ConfigError] naming it.
	Publisher Publisher
	// BatchSize is the most events claimed at once and handed to one Publish call. Default: 100; at
	// most 1000.
	BatchSize int
	// Concurrency is the number of batches in flight at once, each claimed, published and recorded
	// by a runner of its own (each holds one connection while it claims or records). Default: 2.
	Concurrency int
	// PollInterval is how often an idle relay looks for events when no notification wakes it
	// (listening is off or down, an event's NotBefore or retry time has passed, a claim's lease has
	// ended). After any activity (a claimed batch, a notification, Wake) one runner looks every 10ms
	// (PollInterval if shorter) for 1s, or for twice Store.NotifyInterval if that is longer, so that
	// events whose notification the publishing Client debounced wait about 10ms. Listening is off
	// when Store.NotifyInterval is negative (set it so when connections go through a pooler in
	// transaction mode, PgBouncer, where LISTEN cannot work) or when Store.DB is not a *pgxpool.Pool
	// (the listening connection is opened apart, with its configuration). Default: 1s.
	PollInterval time.Duration
	// Lease is how long a claim holds: after it, another relay (or a runner of this one) takes the
	// events over and hands them to its Publisher again. It must exceed Timeout (a relay whose
	// Publish call outlives the lease is fenced out: see [Relay]). Default: 1m.
	//
	// Each claim is bounded on the server by the lesser of 10s and half the Lease (statement_timeout
	// in the claim's transaction, its wait for the other relays' claims and the record of the
	// runner's last batch in it included): a claim's lease runs from the start of its statement.
	Lease time.Duration
	// Timeout bounds each Publish call (its ctx). Default: 30s, or half the Lease if that is less;
	// less than Lease.
	Timeout time.Duration
	// MaxAttempts is the number of attempts that may start before an event is dead. Default: 10.
	MaxAttempts int
	// Backoff sets the delay before a retry (failures counts the failed attempts, from 1). Default:
	// txinbox.Exponential{} (1s, 2s, 4s ... capped at 10 minutes, ±20%).
	Backoff txinbox.Backoff
	// Owner names this relay in its claims (outbox_queue.owner). Default hostname:pid:random.
	Owner string
	// Source names the publishing service in every event it sends: the CloudEvents source
	// (Event.Source), which a txinbox consumer shows with each message that came from this outbox. A
	// URI-reference of 1 to 255 bytes, such as "/orders" or "urn:example:orders"; keep it the same
	// across the service's processes and restarts. Default "/txinbox/" followed by the schema.
	Source string

	tune engine.Tune // derived settings (hot window, claim bound, listening); tests set them (export_test.go)
}

func (c RelayConfig) withDefaults(st txinbox.Store) (RelayConfig, error) {
	bad := func(field, reason string) (RelayConfig, error) {
		return c, &txinbox.ConfigError{Field: field, Reason: reason}
	}
	if c.Publisher == nil {
		return bad("Publisher", "is required")
	}
	if name, reason := typednil.Field(c); name != "" {
		return bad(name, reason)
	}
	c.BatchSize = cmp.Or(c.BatchSize, defaultBatchSize)
	c.Concurrency = cmp.Or(c.Concurrency, defaultConcurrency)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, defaultMaxAttempts)
	c.PollInterval = cmp.Or(c.PollInterval, defaultPollInterval)
	c.Lease = cmp.Or(c.Lease, defaultLease)
	c.Timeout = cmp.Or(c.Timeout, min(defaultTimeout, c.Lease/2))
	c.tune = c.tune.Derive(st.NotifyInterval, c.Lease)
	switch {
	case c.BatchSize < 0 || c.BatchSize > limits.RelayBatchSize:
		return bad("BatchSize", fmt.Sprintf("must be 1 to %d", limits.RelayBatchSize))
	case c.Concurrency < 0:
		return bad("Concurrency", "must not be negative")
	case c.MaxAttempts < 0:
		return bad("MaxAttempts", "must not be negative")
	case c.PollInterval < 0 || c.Lease < 0 || c.Timeout < 0:
		return bad("PollInterval/Lease/Timeout", "must not be negative")
	case c.Timeout >= c.Lease:
		return bad("Timeout", fmt.Sprintf("%v must be less than the Lease (%v)", c.Timeout, c.Lease))
	}
	if c.Backoff == nil {
		c.Backoff = txinbox.Exponential{}
	}
	if c.Source == "" {
		c.Source = "/txinbox/" + st.Schema
	}
	if err := validateSource(c.Source); err != nil {
		return bad("Source", err.Error())
	}
	if c.Owner == "" {
		c.Owner = owner.New()
	}
	return c, nil
}

var _ txinbox.Service = (*Relay)(nil)

// Relay hands committed events to a [Publisher] and records their outcome. Create it with
// [NewRelay], then Start and Stop it ([txinbox.Service]). Any number of relays, in any processes, may
// run on one schema: they share the work.
//
// A runner claims a batch of due events (SELECT ... FOR UPDATE SKIP LOCKED on the narrow
// outbox_queue table, at most one event per key: see the package documentation), stamping a lease
// and a new fencing token, and commits the claim on its own. The claims of all the relays of a
// schema take turns (a transaction-scoped advisory lock, a few milliseconds each), so that every
// claim sees the claims before it: otherwise two claims at once could each take an event of one key
// (an event committed late, older by id than the one the other claim took). The runner hands the
// batch to the Publisher, outside any transaction, then records each event's outcome in one
// statement: sent and dead events leave the queue, failed ones come back after their backoff. That
// statement runs at the start of the runner's next claim, in its transaction (before it takes the
// claim lock), and the one that makes the next event of each key whose event left the queue ready
// runs there once the lock is taken: one round trip and one commit for a batch's record and the
// next claim; a runner that stops, or whose claim fails, records on its own. Only claims still
// holding the runner's token are recorded: a relay whose lease ended (its Publish call hung, or it
// was frozen) and whose events another relay took over changes nothing of the other relay's claim.
//
// Crash recovery: a relay that dies (or hangs, or loses its database) leaves its claims; each is
// taken over by the next claim after its lease ends (at most PollInterval later), and its events are
// handed to a Publisher again, the oldest first within each key. A takeover counts an attempt like
// any claim: an event whose claims never finished MaxAttempts times is dead. Events are not
// isolated after a crash as the worker isolates messages (package worker): a Publisher is not
// expected to kill its process, so a takeover simply runs its claim again.
//
// Delivery is at least once: every committed event is handed to a Publisher until one call
// acknowledges it (returns no error for it) and that is recorded, or until it is dead. An event is
// handed over more than once when the relay dies or loses the database between the
// acknowledgment and the record, when its Publish call outlives the lease (another relay takes it
// over), or when the Publisher reports as failed an event the broker did accept. Every hand-over of
// an event carries the same Event.ID: consumers deduplicate by it.
type Relay struct {
	eng     *engine.Base  // the engine, and the Store's Logger and statements
	store   txinbox.Store // resolved
	cfg     RelayConfig
	lockKey int64
	startMu sync.Mutex

	snooze time.Duration // set by tests (export_test.go); 0: defaultSnooze
}

// defaultSnooze is how long a claim puts off an event blocked behind an event of its key. The relay
// that finishes the blocking event makes the next one ready at once (OutboxReadyNext); the snooze
// only bounds the wait if that relay dies between its record and that statement.
const defaultSnooze = 30 * time.Second

// finishTimeout bounds the statements that record a batch's outcomes on their own (Relay.record; a
// record in a claim's transaction is bounded by the claim's bound, RelayConfig.Lease).
const finishTimeout = 10 * time.Second

// NewRelay returns a relay of st's outbox. st.DB must be a connection pool (a *pgxpool.Pool, say), of
// which the relay holds at most Concurrency connections at once (the one it listens on is opened
// apart); a *pgx.Conn or a pgx.Tx is a *[txinbox.ConfigError] (Field "Store.DB"): a claim must commit
// on its own, and the runners work at once. st.NotifyInterval sets how long it polls fast after
// activity and, negative, turns its LISTEN off. NewRelay checks st and cfg (a *[txinbox.ConfigError] says which field is wrong) and does
// not touch the database; Start does.
func NewRelay(st txinbox.Store, cfg RelayConfig) (*Relay, error) {
	st, err := st.Resolve()
	if err != nil {
		return nil, err
	}
	switch st.DB.(type) {
	case *pgx.Conn, pgx.Tx:
		return nil, &txinbox.ConfigError{Field: "Store.DB", Reason: "the relay needs a connection pool (*pgxpool.Pool): its claims commit on their own, and its runners work at once"}
	}
	cfg, err = cfg.withDefaults(st)
	if err != nil {
		return nil, err
	}
	eng := engine.NewBase(st.DB, st.Logger, st.Schema, engine.Config{Runners: cfg.Concurrency, PollInterval: cfg.PollInterval,
		Attrs: []any{"schema", st.Schema}, Name: "outbox ", Listen: listen(st)}, cfg.tune, "txinbox outbox listener")
	return &Relay{eng: eng, store: st, cfg: cfg, lockKey: schemasql.OutboxClaimLockKey(st.Schema)}, nil
}

// Start checks that the schema has the outbox tables (an error matching txinbox.ErrNotMigrated if
// not; if the database cannot be asked, it logs a warning and starts anyway, since claims retry) and
// that no pooler in transaction mode is in the way, as worker.Pool.Start does (txinbox.ErrPooler),
// starts Concurrency runners and the listener, and returns. ctx bounds the relay's life: when it
// ends, the relay stops as with Stop on an expired ctx. Pass a ctx that outlives a SIGTERM, and call
// Stop with a deadline, to let the batches in flight finish.
func (r *Relay) Start(ctx context.Context) error {
	r.startMu.Lock()
	defer r.startMu.Unlock()
	if r.eng.Started() {
		return errors.New("txinbox: relay already started")
	}
	if err := r.eng.CheckStart(ctx, r.checkSchema, "txinbox: could not check the outbox tables; starting anyway",
		"schema", r.store.Schema); err != nil {
		return err
	}
	return r.eng.Start(ctx, engine.Hooks{
		NewRunner: func() engine.Runner { return &runner{r: r} },
		OnDeadline: func(ctx context.Context) error {
			return fmt.Errorf("txinbox: relay stopped at the deadline with batches in flight: %w", ctx.Err())
		},
	})
}

func (r *Relay) checkSchema(ctx context.Context) error {
	row, err := schemasql.Queries.OutboxTables(ctx, r.store.DB, r.eng.St.Table("outbox"), r.eng.St.Table("outbox_queue"))
	if err != nil {
		return fmt.Errorf("txinbox: checking the schema %q: %w", r.store.Schema, err)
	}
	if !row.Events || !row.Queue {
		return fmt.Errorf("%w: schema %q: no table outbox or outbox_queue (migration 00009), or this role may not read and write them",
			txinbox.ErrNotMigrated, r.store.Schema)
	}
	return nil
}

// Stop stops the relay: it claims no more and waits until the batches in flight have been published
// and recorded, or until ctx ends. Then it ends the Publish calls still running (their ctx) and
// returns an error wrapping ctx's at once; those batches record what their Publisher acknowledged
// and hand the other events back without charging an attempt, in the background (an event whose
// record fails, or whose Publisher ignores its ctx, is taken over after its lease). Every call
// returns the result of the first; a later call waits for the first (or for its own ctx).
func (r *Relay) Stop(ctx context.Context) error { return r.eng.Stop(ctx) }

// Wake tells an idle relay that events may be ready, so that it claims before its poll interval
// ends. The relay's notifications do this for events committed by any process; call it after
// publishing when listening is off.
func (r *Relay) Wake() { r.eng.Wake() }

// runner is one runner of the relay (engine.Runner): it claims a batch, publishes it, and records
// its outcomes in the transaction of its next claim, which follows at once (one round trip and one
// commit for both), or on its own when the runner stops or that claim fails.
type runner struct {
	r     *Relay
	batch []*claimed // claimed, to publish
	fs    []finish   // the outcomes of the last batch, not yet recorded
}

func (u *runner) Claim(ctx context.Context) (engine.Outcome, error) {
	batch, again, err := u.r.claim(ctx, u.fs)
	if err != nil {
		if len(u.fs) > 0 { // rolled back with the claim
			u.r.record(ctx, u.fs)
			u.fs = nil
		}
		return engine.Idle, err
	}
	u.fs = nil
	switch {
	case len(batch) == u.r.cfg.BatchSize:
		u.batch = batch
		return engine.Full, nil
	case len(batch) > 0:
		u.batch = batch
		return engine.Partial, nil
	case again:
		return engine.Again, nil
	}
	return engine.Idle, nil
}

func (u *runner) Run(ctx context.Context) {
	u.fs = u.r.run(ctx, u.batch)
	u.batch = nil
}

// Rest records the outcomes of the last batch on their own: the runner sleeps before its next claim.
func (u *runner) Rest(ctx context.Context) {
	if len(u.fs) > 0 {
		u.r.record(ctx, u.fs)
		u.fs = nil
	}
}

func (u *runner) Done(ctx context.Context) { u.Rest(ctx) }

// claimed is one claimed event.
type claimed struct {
	id        int64
	token     int64
	failed    int
	takenOver bool
	ev        Event
}

// claim claims a batch in a transaction of its own that holds the claim lock (OutboxClaimLock),
// after recording the outcomes fs of the last batch in it (see recordInClaim). again reports that
// it claimed nothing but snoozed events blocked behind their key: others may be due behind them. On
// an error nothing of it is committed (fs included), but for a commit whose answer was lost.
func (r *Relay) claim(ctx context.Context, fs []finish) (batch []*claimed, again bool, err error) {
	p := sqlc.OutboxClaimParams{
		Max: int32(r.cfg.BatchSize), SnoozeSeconds: r.snoozeFor().Seconds(), LeaseSeconds: r.cfg.Lease.Seconds(),
		Owner: pgtype.Text{String: r.cfg.Owner, Valid: true},
	}
	var rec *recordInClaim
	if len(fs) > 0 {
		rec = r.newRecordInClaim(fs)
	}
	var rows []sqlc.OutboxClaimRow
	if b, ok := r.store.DB.(schemasql.BatchSender); ok {
		rows, err = r.claimPipelined(ctx, b, p, rec)
	} else {
		rows, err = r.claimInTx(ctx, p, rec)
	}
	if err != nil {
		return nil, false, err
	}
	if rec != nil {
		r.recorded(fs, rec.rows)
	}
	if len(rows) == 1 && rows[0].ID == 0 {
		return nil, true, nil
	}
	takenOver := 0
	batch = make([]*claimed, len(rows))
	for i, row := range rows {
		c := &claimed{id: row.ID, token: row.Token, failed: int(row.AttemptsFailed), takenOver: row.TakenOver, ev: Event{
			ID: row.EventID, Topic: row.Topic, Key: row.Key, Kind: cmp.Or(row.Kind, row.Topic),
			ContentType: cmp.Or(row.ContentType, DefaultContentType), Source: r.cfg.Source, Payload: []byte(row.Payload),
			CreatedAt: row.CreatedAt.Time, Attempt: int(row.AttemptsStarted),
		}}
		if len(row.Headers) > 2 {
			_ = json.Unmarshal(row.Headers, &c.ev.Headers) // written by Publish as a JSON object of strings
		}
		if row.TakenOver {
			takenOver++
		}
		batch[i] = c
	}
	if takenOver > 0 {
		r.eng.Log.Warn("txinbox: taking over outbox events whose claim's lease ended without an outcome (its relay died, hung or lost its connection)",
			"schema", r.store.Schema, "events", takenOver)
	}
	return batch, false, nil
}

// claimTimeoutMS is the claim's statement_timeout in milliseconds, or "" for none.
func (r *Relay) claimTimeoutMS() string {
	if r.cfg.tune.ClaimTimeout <= 0 {
		return ""
	}
	return strconv.FormatInt(max(r.cfg.tune.ClaimTimeout.Milliseconds(), 1), 10)
}

// claimInTx claims in an explicit transaction: BEGIN, the statement_timeout, the record of the last
// batch's outcomes (rec, if any: OutboxFinish), OutboxClaimLock, OutboxReadyNext (rec's keys, if
// any), OutboxClaim, COMMIT, each a round trip (a DB that cannot pipeline).
func (r *Relay) claimInTx(ctx context.Context, p sqlc.OutboxClaimParams, rec *recordInClaim) ([]sqlc.OutboxClaimRow, error) {
	tx, err := r.store.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if ms := r.claimTimeoutMS(); ms != "" {
		if _, err := tx.Exec(ctx, setClaimTimeout, ms); err != nil {
			return nil, err
		}
	}
	db := r.eng.St.Wrap(tx)
	if rec != nil {
		if rec.rows, err = schemasql.Queries.OutboxFinish(ctx, db, rec.finish); err != nil {
			return nil, schemasql.Err(err)
		}
	}
	if err := schemasql.Queries.OutboxClaimLock(ctx, db, r.lockKey); err != nil {
		return nil, schemasql.Err(err)
	}
	if rec != nil && len(rec.keys) > 0 {
		if err := schemasql.Queries.OutboxReadyNext(ctx, db, rec.keys); err != nil {
			return nil, schemasql.Err(err)
		}
	}
	rows, err := schemasql.Queries.OutboxClaim(ctx, db, p)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return rows, nil
}

// claimPipelined sends the claim's statements (the statement_timeout; the record of the last batch's
// outcomes, if any: OutboxFinish; OutboxClaimLock; OutboxReadyNext for rec's keys, if any;
// OutboxClaim) as one pipeline, in one round trip: they run in one implicit transaction, which
// commits at the pipeline's end (its Sync; a failed statement rolls it back). So the claim lock is
// held only while the server runs the claim and commits it, not across the client's round trips,
// and the runners' claims wait less for one another. Each statement takes its own snapshot (read
// committed), so the claim, which starts once the lock is granted, sees every claim committed
// before, and the record before it in its own transaction. OutboxReadyNext runs after the lock too:
// a claim that snoozed the next event of a key while it still saw the recorded event queued has
// committed before (claims take turns), so its snooze, and the event, are seen and undone; a claim
// after this transaction's commit no longer sees the recorded event. Its rows (and rec's ids) are
// returned only once the commit succeeded.
func (r *Relay) claimPipelined(ctx context.Context, b schemasql.BatchSender, p sqlc.OutboxClaimParams, rec *recordInClaim) (rows []sqlc.OutboxClaimRow, err error) {
	pl := schemasql.NewPipeline(b)
	if ms := r.claimTimeoutMS(); ms != "" {
		pl.Queue(setClaimTimeout, ms)
	}
	if rec != nil {
		sql, args := schemasql.Capture(func(db sqlc.DBTX) { _, _ = schemasql.Queries.OutboxFinish(ctx, r.eng.St.Wrap(db), rec.finish) })
		pl.QueueRows(sql, args, func(rows pgx.Rows) (err error) {
			rec.rows, err = pgx.CollectRows(rows, pgx.RowToStructByPos[sqlc.OutboxFinishRow])
			return err
		})
	}
	defer func() {
		if cerr := pl.Close(); err == nil && cerr != nil {
			rows, err = nil, cerr
		}
	}()
	db := r.eng.St.Wrap(pl)
	if err := schemasql.Queries.OutboxClaimLock(ctx, db, r.lockKey); err != nil {
		return nil, schemasql.Err(err)
	}
	if rec != nil && len(rec.keys) > 0 {
		if err := schemasql.Queries.OutboxReadyNext(ctx, db, rec.keys); err != nil {
			return nil, schemasql.Err(err)
		}
	}
	rows, err = schemasql.Queries.OutboxClaim(ctx, db, p)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return rows, nil
}

const setClaimTimeout = "SELECT set_config('statement_timeout', $1, true)"

func (r *Relay) snoozeFor() time.Duration {
	if r.snooze != 0 {
		return r.snooze
	}
	return defaultSnooze
}

// finish is the outcome of one claimed event.
type finish struct {
	c       *claimed
	outcome txinbox.Outcome // or "" for a claim handed back (release)
	err     error
	delay   time.Duration
	took    time.Duration
	// reason says why the attempt failed, in the event's history (migration 00013): error, panic,
	// timeout, permanent or crashed; "" when sent or released.
	reason string
}

const maxErrorBytes = 8 << 10

// run publishes a claimed batch and returns the outcomes, to be recorded.
func (r *Relay) run(ctx context.Context, batch []*claimed) []finish {
	fs := make([]finish, len(batch))
	var events []Event
	var send []int // indexes into batch of the events handed over
	topics := topicCheck{p: r.cfg.Publisher}
	for i, c := range batch {
		fs[i].c = c
		if c.ev.Attempt > r.cfg.MaxAttempts {
			fs[i].outcome, fs[i].reason = txinbox.OutcomeDead, "crashed"
			fs[i].err = fmt.Errorf("%d attempts started (MaxAttempts %d) and the last never finished: the relay holding it died, hung or lost its connection",
				c.ev.Attempt-1, r.cfg.MaxAttempts)
			continue
		}
		if err := topics.check(c.ev.Topic); err != nil {
			fs[i].err = err
			r.decide(ctx, &fs[i])
			continue
		}
		send = append(send, i)
		events = append(events, c.ev)
	}
	if len(events) > 0 {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		traced := r.traceStart(pctx, events)
		start := time.Now()
		err := callPublisher(pctx, r.cfg.Publisher, events)
		took := time.Since(start)
		timedOut := pctx.Err() != nil && ctx.Err() == nil
		cancel()
		errs := eventErrors(err, len(events))
		defer r.traceEnd(traced, fs, send)
		for k, i := range send {
			f := &fs[i]
			f.took, f.err = took, errs[k]
			r.decide(ctx, f)
			if f.reason == "error" && timedOut {
				f.reason = "timeout"
			}
		}
	}
	return fs
}

// decide sets f's outcome from its error f.err (nil: sent).
func (r *Relay) decide(ctx context.Context, f *finish) {
	switch {
	case f.err == nil:
		f.outcome = txinbox.OutcomeSent
		return
	case ctx.Err() != nil:
		f.outcome = "" // stopping: handed back, not charged
		return
	}
	f.reason = "error"
	if errors.As(f.err, new(*publisherPanic)) {
		f.reason = "panic"
	}
	switch {
	case txinbox.IsPermanent(f.err):
		f.outcome, f.reason = txinbox.OutcomeDead, "permanent"
	case f.c.ev.Attempt >= r.cfg.MaxAttempts:
		f.outcome = txinbox.OutcomeDead
	default:
		f.outcome = txinbox.OutcomeRetry
		f.delay = r.cfg.Backoff.Delay(f.c.failed + 1)
	}
}

// topicCheck asks a Publisher that is a TopicChecker about the topics of one batch, each once.
type topicCheck struct {
	p    Publisher
	done map[string]error
}

// check returns the error of an event of topic that is not to be handed over: permanent (matching
// ErrTopicRefused) if the Publisher refuses the topic; retried if its CheckTopic panicked. nil if the
// Publisher is no TopicChecker.
func (t *topicCheck) check(topic string) error {
	tc, ok := t.p.(TopicChecker)
	if !ok {
		return nil
	}
	if err, ok := t.done[topic]; ok {
		return err
	}
	err := checkTopic(tc, topic)
	if t.done == nil {
		t.done = map[string]error{}
	}
	t.done[topic] = err
	return err
}

// checkTopic asks tc about topic (see topicCheck.check).
func checkTopic(tc TopicChecker, topic string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the Publisher's CheckTopic panicked on topic %q: %v\n\n%s", topic, v, debug.Stack())
		}
	}()
	if err := tc.CheckTopic(topic); err != nil {
		return txinbox.Permanent(fmt.Errorf("%w %q: %w", ErrTopicRefused, topic, err))
	}
	return nil
}

// traceStart tells the Store's Tracer, if any, that events are handed over and, if it is a
// txinbox.Injector, gives each event the trace context of its hand-over (injected into a copy of its
// headers). It returns the context of each hand-over (nil without a Tracer).
func (r *Relay) traceStart(ctx context.Context, events []Event) []context.Context {
	t := r.store.Tracer
	if t == nil {
		return nil
	}
	in, inject := t.(txinbox.Injector)
	ctxs := make([]context.Context, len(events))
	for i := range events {
		ev := &events[i]
		ctxs[i] = t.TraceStart(ctx, txinbox.TraceStart{
			Op: txinbox.OpRelay, Schema: r.store.Schema, Messages: []txinbox.TraceMessage{traceEvent(ev)},
			Attempt: ev.Attempt, OrderingKey: ev.Key,
		})
		if !inject {
			continue
		}
		h := make(map[string]string, len(ev.Headers)+2)
		for k, v := range ev.Headers {
			if k != txinbox.HeaderTraceParent && k != txinbox.HeaderTraceState {
				h[k] = v
			}
		}
		in.Inject(ctxs[i], h)
		ev.Headers = h
	}
	return ctxs
}

// traceEvent describes ev to a tracer.
func traceEvent(ev *Event) txinbox.TraceMessage {
	return txinbox.TraceMessage{ID: ev.ID, Kind: ev.Kind, Topic: ev.Topic, Headers: ev.Headers}
}

// traceEnd ends the hand-overs traceStart began with their outcomes: ctxs[k] is the hand-over of
// fs[send[k]].
func (r *Relay) traceEnd(ctxs []context.Context, fs []finish, send []int) {
	if ctxs == nil {
		return
	}
	for k, i := range send {
		outcome := fs[i].outcome
		if outcome == "" {
			outcome = "released"
		}
		r.store.Tracer.TraceEnd(ctxs[k], txinbox.TraceEnd{Op: txinbox.OpRelay, Outcome: outcome, Err: fs[i].err})
	}
}

// relayed tells the Store's Tracer, if any, the recorded outcome of f's attempt (txinbox.OpRelayed).
func (r *Relay) relayed(f *finish) {
	t := r.store.Tracer
	if t == nil {
		return
	}
	ev := &f.c.ev
	ctx := t.TraceStart(context.Background(), txinbox.TraceStart{Op: txinbox.OpRelayed, Schema: r.store.Schema,
		Messages: []txinbox.TraceMessage{traceEvent(ev)}, Attempt: ev.Attempt, OrderingKey: ev.Key})
	t.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpRelayed, Outcome: f.outcome, Err: f.err, Duration: f.took})
}

// validateSource checks RelayConfig.Source: a URI-reference (RFC 3986) of 1 to 255 bytes.
func validateSource(s string) error {
	if s == "" || len(s) > 255 {
		return errors.New("must be 1 to 255 bytes")
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return fmt.Errorf("%q holds a space, a control or a non-ASCII character: it must be a URI-reference", truncate(s))
		}
	}
	if _, err := url.Parse(s); err != nil {
		return fmt.Errorf("%q is not a URI-reference: %v", truncate(s), err)
	}
	return nil
}

// callPublisher calls p, turning a panic into the error of every event.
func callPublisher(ctx context.Context, p Publisher, events []Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &publisherPanic{fmt.Sprintf("the Publisher panicked: %v\n\n%s", v, debug.Stack())}
		}
	}()
	return p.Publish(ctx, events)
}

// publisherPanic is the error of a Publisher call that panicked.
type publisherPanic struct{ msg string }

func (e *publisherPanic) Error() string { return e.msg }

// eventErrors returns the error of each of n events from a Publish call's error.
func eventErrors(err error, n int) []error {
	errs := make([]error, n)
	if err == nil {
		return errs
	}
	var be *BatchError
	if errors.As(err, &be) {
		if len(be.Errs) == n {
			copy(errs, be.Errs)
			return errs
		}
		err = fmt.Errorf("the Publisher returned a BatchError of %d errors for %d events: %w", len(be.Errs), n, err)
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// finishParams returns OutboxFinish's parameters for the outcomes fs.
func finishParams(fs []finish, owner string) sqlc.OutboxFinishParams {
	n := len(fs)
	p := sqlc.OutboxFinishParams{Ids: make([]int64, n), Tokens: make([]int64, n), Outcomes: make([]string, n),
		Errors: make([]string, n), Delays: make([]float64, n), Uncount: make([]int32, n),
		Reasons: make([]string, n), ElapsedMs: make([]float64, n), Owner: owner}
	for i, f := range fs {
		p.Ids[i], p.Tokens[i], p.Delays[i] = f.c.id, f.c.token, f.delay.Seconds()
		p.Reasons[i], p.ElapsedMs[i] = f.reason, float64(f.took)/float64(time.Millisecond)
		p.Outcomes[i] = string(f.outcome)
		if f.outcome == "" {
			p.Outcomes[i], p.Uncount[i] = "release", 1
		}
		if f.err != nil {
			p.Errors[i] = storable(f.err.Error())
		}
	}
	return p
}

// recordInClaim is the record of a batch's outcomes in the transaction of the next claim:
// OutboxFinish, then, after OutboxClaimLock, OutboxReadyNext for the key of every event sent or
// dead. Its keys are not narrowed to the events whose outcome was recorded (that is known only once
// the pipeline has run): for a key whose event another relay took over, OutboxReadyNext finds that
// event, claimed, as the oldest of its key and changes nothing, or finds the next event made ready
// by that relay already.
type recordInClaim struct {
	finish sqlc.OutboxFinishParams
	keys   []string
	rows   []sqlc.OutboxFinishRow // OutboxFinish's answer (the ids recorded), once the claim committed
}

func (r *Relay) newRecordInClaim(fs []finish) *recordInClaim {
	return &recordInClaim{finish: finishParams(fs, r.cfg.Owner), keys: leftKeys(fs, nil)}
}

// leftKeys returns the keys, each once, of the events of fs that leave the queue (sent or dead),
// only those of recorded if it is not nil: the keys whose next event OutboxReadyNext makes ready.
func leftKeys(fs []finish, recorded map[int64]bool) []string {
	var keys []string
	for _, f := range fs {
		if (recorded == nil || recorded[f.c.id]) && (f.outcome == txinbox.OutcomeSent || f.outcome == txinbox.OutcomeDead) &&
			f.c.ev.Key != "" && !slices.Contains(keys, f.c.ev.Key) {
			keys = append(keys, f.c.ev.Key)
		}
	}
	return keys
}

// record records the outcomes fs in one statement (fenced by token), then makes the next event of
// each key whose event it made leave the queue ready, logs and tells the Store's Tracer. It is the record
// of a batch on its own: when the runner stops, or when the claim that was to record it failed. That
// claim may have committed with the record and lost its answer (the connection dropped before it
// came): OutboxFinish then records nothing again, and reports the events whose outcome that claim
// recorded (earlier), which are logged and told to the Tracer here, once, as the claim would have.
func (r *Relay) record(ctx context.Context, fs []finish) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	rows, err := schemasql.Queries.OutboxFinish(rctx, r.eng.St.Wrap(r.store.DB), finishParams(fs, r.cfg.Owner))
	if err != nil {
		r.eng.Log.Warn("txinbox: recording outbox outcomes failed; the events are taken over when their lease ends",
			"schema", r.store.Schema, "events", len(fs), "err", err)
		return
	}
	now := make(map[int64]bool, len(rows)) // recorded by this statement, not earlier
	for _, row := range rows {
		now[row.ID] = !row.Earlier
	}
	if keys := leftKeys(fs, now); len(keys) > 0 {
		if err := schemasql.Queries.OutboxReadyNext(rctx, r.eng.St.Wrap(r.store.DB), keys); err != nil {
			r.eng.Log.Warn("txinbox: making the next outbox events of keys ready failed; they go when their snooze ends",
				"schema", r.store.Schema, "keys", len(keys), "snooze", r.snoozeFor(), "err", err)
		}
	}
	r.recorded(fs, rows)
}

// recorded logs the outcomes fs and tells the Store's Tracer (txinbox.OpRelayed), once their record
// committed; rows is OutboxFinish's answer: the ids whose outcome was recorded, now or earlier (by a
// claim whose commit answer was lost). The outcomes of the other events were not recorded: another
// relay took their claim over after its lease ended, and the Tracer is told nothing of them.
func (r *Relay) recorded(fs []finish, rows []sqlc.OutboxFinishRow) {
	recorded := make(map[int64]bool, len(rows))
	earlier := 0
	for _, row := range rows {
		recorded[row.ID] = true
		if row.Earlier {
			earlier++
		}
	}
	if earlier > 0 {
		r.eng.Log.Info("txinbox: outbox outcomes were recorded already, by the claim whose commit answer was lost",
			"schema", r.store.Schema, "events", earlier)
	}
	for _, f := range fs {
		if !recorded[f.c.id] {
			r.eng.Log.Warn("txinbox: outbox event taken over by another relay after its lease ended; its outcome here was not recorded",
				"schema", r.store.Schema, "event_id", f.c.ev.ID, "token", f.c.token, "outcome", f.outcome)
			continue
		}
		if f.outcome == "" {
			continue
		}
		switch f.outcome {
		case txinbox.OutcomeDead:
			r.eng.Log.Warn("txinbox: outbox event is dead", "schema", r.store.Schema, "event_id", f.c.ev.ID,
				"topic", f.c.ev.Topic, "key", f.c.ev.Key, "attempt", f.c.ev.Attempt, "err", f.err)
		case txinbox.OutcomeRetry:
			r.eng.Log.Debug("txinbox: publishing an outbox event failed; will retry", "schema", r.store.Schema,
				"event_id", f.c.ev.ID, "topic", f.c.ev.Topic, "attempt", f.c.ev.Attempt, "retry_in", f.delay, "err", f.err)
		}
		r.relayed(&f)
	}
}

// storable makes an error message storable as text: valid UTF-8, no NUL, at most maxErrorBytes.
func storable(s string) string {
	if len(s) > maxErrorBytes {
		s = s[:maxErrorBytes] + "…"
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
