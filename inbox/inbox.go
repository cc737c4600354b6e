package inbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
)

// DB is what txinbox needs from a database handle: run statements and begin transactions.
// *pgxpool.Pool and *pgx.Conn satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config configures a Client. The zero value is valid.
type Config struct {
	// Schema is the PostgreSQL schema holding the inbox tables. Default: DefaultSchema ("public").
	Schema string
	// MaxPayloadBytes rejects larger payloads with a *ValidationError. Default:
	// DefaultMaxPayloadBytes (1 MiB). A payload's size counts each JSON number at the length PostgreSQL
	// numeric prints it (1e6 as 7 bytes), so that a few bytes of exponent cannot become megabytes of
	// stored text; numbers numeric cannot hold, lone UTF-16 surrogate escapes and \u0000 are rejected.
	// Headers are bounded apart from the payload, whatever this limit: names of at most
	// MaxHeaderNameBytes (256), values of at most MaxHeaderValueBytes (8192), and all of a message's
	// names and values together at most MaxHeadersBytes (1 MiB, whatever their number).
	MaxPayloadBytes int
	// NotifyInterval is the least time between two wake-up notifications (NOTIFY on NotifyChannel)
	// this Client sends for one consumer; a message received sooner after the previous one is found by
	// the worker pools' polling, which stays fast after any activity. See notify.go for why and for
	// figures. Default: DefaultNotifyInterval (50ms). Negative: never notify.
	NotifyInterval time.Duration
	// Observer, if set, is told about every receive call (metrics, tracing), and about the seen-key
	// cache if it implements SeenObserver. Default: none.
	Observer Observer
	// SeenCache, if set, answers redeliveries of recently accepted messages without a database round
	// trip (NewLRUCache in process, module github.com/txinbox/txinbox/seenredis on Redis). Every
	// receive call looks its keys up first: a message whose key is cached with the same kind and the
	// same payload bytes (SeenFingerprint) gets a Duplicate receipt with Cached set, its ID as cached,
	// and State and Result unknown (empty); every other message, and all of them when the cache fails
	// or takes longer than SeenTimeout, goes to the database as without a cache.
	//
	// A key is cached only after its row has committed: after Receive and ReceiveMany return, and for
	// ReceiveTx and ReceiveManyTx (or a Client whose DB is a pgx.Tx) only when the caller calls
	// Remember after the commit (a DB that runs Receive inside a transaction it began with a BEGIN
	// statement cannot be told apart: give such a Client no SeenCache). Cached are Inserted messages and Duplicates of pending or dead ones
	// (not completed or processing ones, whose window may end sooner than SeenTTL). Each entry expires
	// SeenTTL after the receive call started, so it never outlives the key's dedup window as long as
	// SeenTTL is at most the worker's Retention (a minute less leaves room for clock drift and for the
	// time a remote cache takes to apply a write).
	//
	// Rows deleted early (DiscardDead, DiscardPending, Purge) make their keys new again. Those calls,
	// made through a Client with a SeenCache, invalidate the whole cache (a new epoch: SeenCache) once
	// they deleted something; for Redis that reaches every process sharing it. Deletions made by
	// another Client with another cache (an LRUCache in another process, or the txinbox command) are
	// not seen by this one: for up to SeenTTL, a redelivery of such a key may still be answered
	// Duplicate instead of being stored again. Cache errors never reach the caller: they are reported
	// to a SeenObserver. Default: none.
	SeenCache SeenCache
	// SeenTTL is how long a cache entry lives, from the start of the receive call that made it;
	// required (positive) with SeenCache, and at most the Retention of the workers of these
	// consumers (see SeenCache).
	SeenTTL time.Duration
	// SeenTimeout bounds each SeenCache call; a slower one counts as failed (SeenFallback). Default:
	// DefaultSeenTimeout (100ms).
	SeenTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if err := ValidateSchema(c.Schema); err != nil {
		return c, err
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.MaxPayloadBytes < 0 {
		return c, &ConfigError{Field: "MaxPayloadBytes", Reason: "must not be negative"}
	}
	if c.SeenCache != nil && c.SeenTTL <= 0 {
		return c, &ConfigError{Field: "SeenTTL", Reason: "must be positive with a SeenCache (at most the workers' Retention)"}
	}
	if c.SeenTimeout == 0 {
		c.SeenTimeout = DefaultSeenTimeout
	}
	if c.SeenTimeout < 0 {
		return c, &ConfigError{Field: "SeenTimeout", Reason: "must not be negative"}
	}
	return c, nil
}

// Message is one message to receive.
type Message struct {
	// Consumer is the subscription or handler group the message is for. Deduplication is per
	// consumer: the same key received for two consumers is stored, and applied, once for each.
	Consumer string
	// Key is the idempotency key: 1 to MaxKeyBytes bytes of UTF-8 without control characters. See
	// ProducerKey, ContentKey, CompositeKey and BrokerKey for the usual strategies.
	Key string
	// Kind selects the handler, like a message type name ("OrderPaid").
	Kind string
	// Payload is the message body, a JSON document (stored as jsonb).
	Payload []byte
	// Headers are stored with the message and handed to the handler (trace context, for example).
	Headers map[string]string
	// OrderingKey, when set, makes messages with the same ordering key run one at a time, in the order
	// they were received (an aggregate id, for example).
	OrderingKey string
	// NotBefore delays the first attempt until that time. Zero means now.
	NotBefore time.Time
}

// Outcome says what receiving did with a message.
type Outcome int

const (
	// Inserted means the message is new and stored as pending.
	Inserted Outcome = iota + 1
	// Duplicate means the key is stored with the same kind and payload; nothing was written.
	// Receipt.State and Receipt.Result report the stored message.
	Duplicate
	// Conflict means the key is stored with a different kind or payload; nothing was written.
	// Receipt.Err is a *KeyConflictError.
	Conflict
)

func (o Outcome) String() string {
	switch o {
	case Inserted:
		return "inserted"
	case Duplicate:
		return "duplicate"
	case Conflict:
		return "conflict"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// State is the state of a stored message.
type State string

// The states of a message.
const (
	StatePending    State = "pending"    // waiting for its first or next attempt
	StateProcessing State = "processing" // claimed by a worker
	StateCompleted  State = "completed"  // its handler committed
	StateDead       State = "dead"       // given up: out of attempts, permanent error, or undecodable
)

// Receipt is the result of receiving one message.
type Receipt struct {
	ID      int64   // the stored message holding the key
	Outcome Outcome // Inserted, Duplicate or Conflict
	State   State   // state of the stored message (StatePending when inserted); "" when Cached
	Result  []byte  // for a Duplicate: the result its handler stored, if any (JSON); nil when Cached
	Err     error   // for a Conflict: a *KeyConflictError
	// Cached is true for a Duplicate answered by the seen-key cache (Config.SeenCache) without
	// reading the database: ID is the id cached for the key, State and Result are unknown (empty;
	// GetMessage reads them).
	Cached bool

	seen seenMark // set for receipts of a transaction that Remember may cache
}

// Client receives messages into the inbox. It is safe for concurrent use.
type Client struct {
	db     DB
	cfg    Config
	st     *store.Store
	notify notifier // debounces wake-up notifications (notify.go)
}

// NewClient returns a Client using db (usually a *pgxpool.Pool) for the calls without a Tx suffix.
func NewClient(db DB, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{db: db, cfg: cfg, st: store.New(cfg.Schema)}, nil
}

// Schema returns the schema the client uses.
func (c *Client) Schema() string { return c.cfg.Schema }

// Receive stores msg unless its key is already stored for its consumer, in one statement of its own.
// A duplicate is not an error: see Receipt.Outcome. A key reused with a different kind or payload
// returns the receipt and a *KeyConflictError (errors.Is ErrKeyConflict). An invalid message returns a
// *ValidationError (errors.Is ErrInvalidMessage) and writes nothing.
func (c *Client) Receive(ctx context.Context, msg Message) (Receipt, error) {
	return c.receiveOne(ctx, c.db, msg)
}

// ReceiveTx is Receive inside the caller's transaction: the message is stored, and becomes visible to
// workers, only if tx commits.
//
// Until tx ends, the stored key holds a row lock on the inbox's unique index: a concurrent receive of
// the same consumer and key (Receive, ReceiveMany or another ReceiveTx, in any process) waits for tx,
// then reports a Duplicate or a Conflict if tx committed, or stores the message itself if tx rolled
// back. Keep such transactions short.
func (c *Client) ReceiveTx(ctx context.Context, tx pgx.Tx, msg Message) (Receipt, error) {
	return c.receiveOne(ctx, tx, msg)
}

func (c *Client) receiveOne(ctx context.Context, db sqlc.DBTX, msg Message) (Receipt, error) {
	rs, err := c.receive(ctx, db, []Message{msg})
	if err != nil {
		return Receipt{}, err
	}
	return rs[0], rs[0].Err
}

// ReceiveMany stores a batch of messages in one round trip (one statement) and returns a receipt per
// message, in order. Conflicts are reported per receipt (Receipt.Err) and do not fail the batch. If
// any message is invalid, it returns a *ValidationError naming the first one and writes nothing. A key
// that appears twice in the batch is stored once; the later one is a Duplicate (or a Conflict) of it.
func (c *Client) ReceiveMany(ctx context.Context, msgs []Message) ([]Receipt, error) {
	return c.receive(ctx, c.db, msgs)
}

// ReceiveManyTx is ReceiveMany inside the caller's transaction.
func (c *Client) ReceiveManyTx(ctx context.Context, tx pgx.Tx, msgs []Message) ([]Receipt, error) {
	return c.receive(ctx, tx, msgs)
}

// Validate checks msg as Receive would, without writing anything.
func (c *Client) Validate(msg Message) error { return c.validate(0, &msg) }

func (c *Client) validate(i int, m *Message) error {
	fail := func(field string, err error) error {
		return &ValidationError{Index: i, Field: field, Reason: err.Error()}
	}
	if err := ValidateName(m.Consumer); err != nil {
		return fail("consumer", err)
	}
	if err := ValidateKey(m.Key); err != nil {
		return fail("key", err)
	}
	if err := ValidateName(m.Kind); err != nil {
		return fail("kind", err)
	}
	if err := validatePayload(m.Payload, c.cfg.MaxPayloadBytes); err != nil {
		return fail("payload", err)
	}
	if err := validateHeaders(m.Headers); err != nil {
		return fail("headers", err)
	}
	if err := validateText(m.OrderingKey, MaxOrderingKeyBytes, true); err != nil {
		return fail("ordering_key", err)
	}
	return nil
}

type batchKey struct{ consumer, key string }

// receiveMessages is receive without the Observer (observer.go): it validates msgs, then stores them
// through the seen-key cache if there is one.
func (c *Client) receiveMessages(ctx context.Context, db sqlc.DBTX, msgs []Message) ([]Receipt, error) {
	for i := range msgs {
		if err := c.validate(i, &msgs[i]); err != nil {
			return nil, err
		}
	}
	if c.cfg.SeenCache != nil && len(msgs) > 0 {
		return c.receiveSeen(ctx, db, msgs)
	}
	return c.receiveDepth(ctx, db, msgs, 0)
}

// receiveDepth stores msgs, already validated; depth counts the rounds spent on keys deleted while
// we looked.
func (c *Client) receiveDepth(ctx context.Context, db sqlc.DBTX, msgs []Message, depth int) ([]Receipt, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	n := len(msgs)
	p := sqlc.ReceiveBatchParams{
		Consumers: make([]string, 0, n), Keys: make([]string, 0, n), Kinds: make([]string, 0, n),
		Payloads: make([]string, 0, n), Headers: make([]string, 0, n), OrderingKeys: make([]string, 0, n),
		RunAts: make([]pgtype.Timestamptz, 0, n),
	}
	// first[i] is the index of the first message in the batch with msgs[i]'s key; sent[j] the batch
	// index of the j-th message sent.
	first := make([]int, n)
	seen := make(map[batchKey]int, n)
	sent := make([]int, 0, n)
	for i := range msgs {
		m := &msgs[i]
		k := batchKey{m.Consumer, m.Key}
		if j, ok := seen[k]; ok {
			first[i] = j
			continue
		}
		seen[k] = i
		first[i] = i
		sent = append(sent, i)
		p.Consumers = append(p.Consumers, m.Consumer)
		p.Keys = append(p.Keys, m.Key)
		p.Kinds = append(p.Kinds, m.Kind)
		p.Payloads = append(p.Payloads, string(m.Payload))
		p.Headers = append(p.Headers, string(headersJSON(m.Headers)))
		p.OrderingKeys = append(p.OrderingKeys, m.OrderingKey)
		p.RunAts = append(p.RunAts, runAt(m.NotBefore))
	}

	rows, err := c.receiveBatch(ctx, db, p) // ReceiveBatch, with debounced wake-up notifications
	if err != nil {
		return nil, translateError(err)
	}
	out := make([]Receipt, n)
	var missing []int // batch indexes whose conflicting row was not visible to the statement
	var expired []int // batch indexes whose stored row is past its dedup window
	for j, r := range rows {
		i := sent[j]
		switch {
		case r.Inserted:
			out[i] = Receipt{ID: r.ID, Outcome: Inserted, State: StatePending}
		case r.ID == 0:
			missing = append(missing, i)
		case r.Expired:
			out[i].ID = r.ID
			expired = append(expired, i)
		default:
			out[i] = c.existing(&msgs[i], r.ID, r.State, r.SameFingerprint, r.Result)
		}
	}
	var vanished []int // batch indexes whose stored row was deleted (cleaned) while we looked
	if len(missing) > 0 {
		// Inserted by a transaction that committed after our statement started: read them now.
		more, gone, err := c.lookup(ctx, db, msgs, missing, out)
		if err != nil {
			return nil, err
		}
		expired = append(expired, more...)
		vanished = append(vanished, gone...)
	}
	if len(expired) > 0 {
		gone, err := c.renew(ctx, db, msgs, expired, out)
		if err != nil {
			return nil, err
		}
		vanished = append(vanished, gone...)
	}
	if len(vanished) > 0 {
		// The cleaner deleted these expired rows between our statements: receive them again (they
		// are new now). Bounded, since each round needs another concurrent deletion.
		if depth >= 3 {
			return nil, fmt.Errorf("txinbox: %d stored keys kept disappearing while receiving; receive again", len(vanished))
		}
		again := make([]Message, len(vanished))
		for k, i := range vanished {
			again[k] = msgs[i]
		}
		rs, err := c.receiveDepth(ctx, db, again, depth+1)
		if err != nil {
			return nil, err
		}
		for k, i := range vanished {
			out[i] = rs[k]
		}
	}
	var recheck []int // repeats to compare with the stored row itself
	for i := range msgs {
		if j := first[i]; j != i {
			// A repeat within the batch: compare with the first occurrence, which is what is stored
			// unless the first occurrence was a Conflict.
			same := msgs[j].Kind == msgs[i].Kind && jsonEqual(msgs[j].Payload, msgs[i].Payload)
			fr := out[j]
			switch {
			case fr.Outcome != Conflict:
				out[i] = c.existing(&msgs[i], fr.ID, string(fr.State), same, fr.Result)
			case same: // as the first occurrence, so it differs from the stored row too
				out[i] = c.existing(&msgs[i], fr.ID, string(fr.State), false, nil)
			default: // may be the stored payload: ask the database (rare: a round trip more)
				recheck = append(recheck, i)
			}
		}
	}
	if len(recheck) > 0 {
		expired, vanished, err := c.lookup(ctx, db, msgs, recheck, out)
		if err != nil {
			return nil, err
		}
		if len(expired)+len(vanished) > 0 {
			return nil, fmt.Errorf("txinbox: %d stored keys expired or were deleted while receiving; receive again", len(expired)+len(vanished))
		}
	}
	return out, nil
}

func (c *Client) existing(m *Message, id int64, state string, same bool, result []byte) Receipt {
	if !same {
		return Receipt{ID: id, Outcome: Conflict, State: State(state),
			Err: &KeyConflictError{Consumer: m.Consumer, Key: m.Key, ID: id}}
	}
	return Receipt{ID: id, Outcome: Duplicate, State: State(state), Result: result}
}

// lookup fills in the receipts of the messages at idx from their stored rows (a statement of its own,
// so with a fresh snapshot under READ COMMITTED) and returns those whose row has expired.
func (c *Client) lookup(ctx context.Context, db sqlc.DBTX, msgs []Message, idx []int, out []Receipt) (expired, vanished []int, err error) {
	p := sqlc.LookupKeysParams{}
	for _, i := range idx {
		m := &msgs[i]
		p.Consumers = append(p.Consumers, m.Consumer)
		p.Keys = append(p.Keys, m.Key)
		p.Kinds = append(p.Kinds, m.Kind)
		p.Payloads = append(p.Payloads, string(m.Payload))
	}
	rows, err := store.Queries.LookupKeys(ctx, c.st.Wrap(db), p)
	if err != nil {
		return nil, nil, translateError(err)
	}
	found := make([]bool, len(idx))
	for _, r := range rows {
		found[r.Ord-1] = true
		i := idx[r.Ord-1]
		if r.Expired {
			out[i].ID = r.ID
			expired = append(expired, i)
			continue
		}
		out[i] = c.existing(&msgs[i], r.ID, r.State, r.SameFingerprint, r.Result)
	}
	for k, ok := range found {
		if !ok { // deleted (cleaned or purged) between the two statements
			vanished = append(vanished, idx[k])
		}
	}
	return expired, vanished, nil
}

// renew reuses the rows of keys whose dedup window has ended (out[i].ID set): the message is accepted
// as new. A row that another receiver renewed first is reported as that message's duplicate; the
// indexes of rows deleted meanwhile are returned.
func (c *Client) renew(ctx context.Context, db sqlc.DBTX, msgs []Message, idx []int, out []Receipt) (vanished []int, err error) {
	p := sqlc.RenewExpiredParams{}
	for _, i := range idx {
		m := &msgs[i]
		p.Ids = append(p.Ids, out[i].ID)
		p.Kinds = append(p.Kinds, m.Kind)
		p.Payloads = append(p.Payloads, string(m.Payload))
		p.Headers = append(p.Headers, string(headersJSON(m.Headers)))
		p.OrderingKeys = append(p.OrderingKeys, m.OrderingKey)
		p.RunAts = append(p.RunAts, runAt(m.NotBefore))
	}
	ids, err := store.Queries.RenewExpired(ctx, c.st.Wrap(db), p)
	if err != nil {
		return nil, translateError(err)
	}
	renewed := make(map[int64]bool, len(ids))
	for _, id := range ids {
		renewed[id] = true
	}
	var lost []int
	for _, i := range idx {
		if renewed[out[i].ID] {
			out[i] = Receipt{ID: out[i].ID, Outcome: Inserted, State: StatePending}
		} else {
			lost = append(lost, i)
		}
	}
	if len(lost) > 0 {
		again, gone, err := c.lookup(ctx, db, msgs, lost, out)
		if err != nil {
			return nil, err
		}
		if len(again) > 0 {
			return nil, fmt.Errorf("txinbox: %d expired keys could not be renewed; receive again", len(again))
		}
		return gone, nil
	}
	return nil, nil
}

func headersJSON(h map[string]string) []byte {
	if len(h) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(h) // a map[string]string always marshals
	return b
}

func runAt(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()} }

// jsonEqual compares two JSON documents by value (object key order and white space do not matter;
// numbers compare by their text), close to how jsonb fingerprints compare.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if decodeNumbers(a, &va) != nil || decodeNumbers(b, &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(canonicalNumbers(va))
	jb, _ := json.Marshal(canonicalNumbers(vb))
	return string(ja) == string(jb)
}

// canonicalNumbers replaces, in a value decoded with UseNumber, every number by the text PostgreSQL
// numeric prints for it (numericText), so that two payloads compare equal exactly when their jsonb
// texts (and so their fingerprints) are equal: 1E2 and 100, or -0 and 0, are the same payload.
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return json.Number(numericText(string(x)))
	case []any:
		for i := range x {
			x[i] = canonicalNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = canonicalNumbers(x[k])
		}
	}
	return v
}

func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// Undecodable is a message whose bytes could not be turned into a Message (not JSON, say). Broker
// adapters store it dead, with its raw bytes, so it is neither lost nor redelivered forever.
type Undecodable struct {
	Consumer string
	Key      string // as derived by the adapter; ContentKey of the raw bytes when there is none
	Kind     string // the kind, if known; "undecodable" otherwise
	Raw      []byte
	Headers  map[string]string
	Reason   string // why it could not be decoded; stored as the last error
}

// ReceiveUndecodableTx stores u as a dead message (state dead, payload null, raw bytes kept) inside
// tx. A key already stored is left alone and reported as a Duplicate.
func (c *Client) ReceiveUndecodableTx(ctx context.Context, tx pgx.Tx, u Undecodable) (Receipt, error) {
	if u.Kind == "" {
		u.Kind = "undecodable"
	}
	if u.Key == "" {
		u.Key = ContentKey(u.Kind, u.Raw)
	}
	probe := Message{Consumer: u.Consumer, Key: u.Key, Kind: u.Kind, Payload: []byte("null"), Headers: u.Headers}
	if err := c.validate(0, &probe); err != nil {
		return Receipt{}, err
	}
	if len(u.Raw) > c.cfg.MaxPayloadBytes {
		return Receipt{}, &ValidationError{Field: "raw", Reason: fmt.Sprintf("is %d bytes, more than the limit of %d", len(u.Raw), c.cfg.MaxPayloadBytes)}
	}
	reason := strings.ToValidUTF8(u.Reason, "?")
	id, err := store.Queries.InsertDead(ctx, c.st.Wrap(tx), sqlc.InsertDeadParams{
		Consumer: u.Consumer, Key: u.Key, Kind: u.Kind, Raw: u.Raw, Headers: headersJSON(u.Headers),
		LastError: pgtype.Text{String: strings.ReplaceAll(reason, "\x00", ""), Valid: true},
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Receipt{Outcome: Duplicate, State: StateDead}, nil
	}
	if err != nil {
		return Receipt{}, translateError(err)
	}
	return Receipt{ID: id, Outcome: Inserted, State: StateDead}, nil
}
