package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/textcheck"
	"github.com/txinbox/txinbox/internal/typednil"
)

// storeFor returns the statement rewriter of st's schema.
func storeFor(st txinbox.Store) *schemasql.Schema { return schemasql.New(st.Schema) }

// Config configures a Client. The zero value is valid.
type Config struct {
	// MaxPayloadBytes rejects larger payloads with a *txinbox.ValidationError. Default: 1 MiB
	// (1 << 20). A payload's size counts each JSON number at the length PostgreSQL
	// numeric prints it (1e6 as 7 bytes), so that a few bytes of exponent cannot become megabytes of
	// stored text; numbers numeric cannot hold, lone UTF-16 surrogate escapes and \u0000 are rejected.
	// Headers are bounded apart from the payload, whatever this limit (see Message.Headers).
	MaxPayloadBytes int
	// CoalesceMax is the most concurrent [Client.Receive] calls whose messages share one statement
	// and one commit (group commit). Default: 64. 1 turns coalescing off: each Receive call runs a
	// statement of its own. Negative is a *[txinbox.ConfigError]. Coalescing never applies to
	// ReceiveTx, ReceiveMany and ReceiveManyTx, nor to a Client whose Store.DB is a pgx.Tx or a
	// *pgx.Conn (a single connection cannot run the shared statements concurrently). The shared
	// statements run on Store.DB from goroutines of their own, concurrently with each other.
	CoalesceMax int
	// CoalesceWait bounds how long a Receive call waits for a shared statement that is already
	// running before its own is sent anyway: its group is sent when a running statement finishes, when
	// it holds CoalesceMax calls, or CoalesceWait after its first call arrived, whichever comes first.
	// A call on a Client with no shared statement running does not wait. Default: 500µs. Negative is
	// a *[txinbox.ConfigError].
	CoalesceWait time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = defaultMaxPayloadBytes
	}
	if c.MaxPayloadBytes < 0 {
		return c, &txinbox.ConfigError{Field: "MaxPayloadBytes", Reason: "must not be negative"}
	}
	if c.CoalesceMax == 0 {
		c.CoalesceMax = defaultCoalesceMax
	}
	if c.CoalesceMax < 0 {
		return c, &txinbox.ConfigError{Field: "CoalesceMax", Reason: "must not be negative (1 turns coalescing off)"}
	}
	if c.CoalesceWait == 0 {
		c.CoalesceWait = defaultCoalesceWait
	}
	if c.CoalesceWait < 0 {
		return c, &txinbox.ConfigError{Field: "CoalesceWait", Reason: "must not be negative"}
	}
	return c, nil
}

// Message is one message to receive.
type Message struct {
	// Consumer is the subscription or handler group the message is for. Deduplication is per
	// consumer: the same key received for two consumers is stored, and applied, once for each.
	Consumer string
	// Key is the idempotency key: 1 to 512 bytes of UTF-8 without control characters. See
	// ProducerKey, ContentKey, CompositeKey and BrokerKey for the usual strategies.
	Key string
	// Kind selects the handler, like a message type name ("OrderPaid").
	Kind string
	// Payload is the message body, a JSON document (stored as jsonb).
	Payload []byte
	// Headers are stored with the message and handed to the handler (trace context, for example).
	// Names are 1 to 256 bytes and values at most 8192 bytes, of valid UTF-8 without control
	// characters; all of a message's names and values together are at most 1 MiB (1 << 20 bytes),
	// whatever their number. A message beyond these limits is a *txinbox.ValidationError.
	Headers map[string]string
	// OrderingKey, when set, makes messages with the same ordering key run one at a time, in the order
	// they were received (an aggregate id, for example). At most 512 bytes of UTF-8 without control
	// characters.
	OrderingKey string
	// NotBefore delays the first attempt until that time. Zero means now.
	NotBefore time.Time
}

// Outcome says what receiving did with a message. Like txinbox.Outcome (an attempt's), it is a
// typed string whose values are the words logs and metrics show (the outcome label of
// txinbox_received_total); the zero value "" is no outcome.
type Outcome string

// The outcomes of receiving a message.
const (
	// Inserted ("inserted") means the message is new and stored as pending.
	Inserted Outcome = "inserted"
	// Duplicate ("duplicate") means the key is stored with the same kind and payload; nothing was
	// written. Receipt.State and Receipt.Result report the stored message.
	Duplicate Outcome = "duplicate"
	// Conflict ("conflict") means the key is stored with a different kind or payload; nothing was
	// written. Receipt.Err is a *KeyConflictError.
	Conflict Outcome = "conflict"
)

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
	// Cached is true for a Duplicate answered by the seen-key cache (txinbox.Store.SeenCache) without
	// reading the database: ID is the id cached for the key, State and Result are unknown (empty;
	// admin.Admin.GetMessage reads them).
	Cached bool

	mark seenMark // set for receipts of a transaction that Remember may cache
}

// Client receives messages into the inbox. It is safe for concurrent use.
type Client struct {
	store  txinbox.Store
	cfg    Config
	st     *schemasql.Schema
	notify notifier   // debounces wake-up notifications (notify.go)
	co     *coalescer // shares statements between concurrent Receive calls; nil when off (coalesce.go)
	// registered holds the consumers this Client has registered (RegisterConsumer, see inGeneration).
	registered sync.Map
	// customPlans: the server refused ReceiveBatch's generic plan (Citus cannot make a distributed
	// plan of it), so small receives no longer force it (receiveRows).
	customPlans atomic.Bool
}

// New returns a Client of store (whose DB runs the calls without a Tx suffix, and whose Schema,
// Retention and NotifyInterval it uses). An invalid store or cfg returns a *[txinbox.ConfigError]
// naming the field.
func New(store txinbox.Store, cfg Config) (*Client, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	if name, reason := typednil.Field(cfg); name != "" {
		return nil, &txinbox.ConfigError{Field: name, Reason: reason}
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{store: store, cfg: cfg, st: storeFor(store), notify: notifier{interval: store.NotifyInterval, channel: store.NotifyChannel()}}
	if coalesces(store.DB, cfg.CoalesceMax) {
		c.co = &coalescer{c: c, max: cfg.CoalesceMax, wait: cfg.CoalesceWait}
	}
	return c, nil
}

// Validate checks msg as Receive would, without writing anything.
func (c *Client) Validate(msg Message) error { return c.validate(0, &msg) }

func (c *Client) validate(i int, m *Message) error {
	fail := func(field string, err error) error {
		return &txinbox.ValidationError{Index: i, Field: field, Reason: err.Error()}
	}
	if err := txinbox.ValidateName(m.Consumer); err != nil {
		return fail("consumer", err)
	}
	if err := txinbox.ValidateKey(m.Key); err != nil {
		return fail("key", err)
	}
	if err := txinbox.ValidateName(m.Kind); err != nil {
		return fail("kind", err)
	}
	if err := validatePayload(m.Payload, c.cfg.MaxPayloadBytes); err != nil {
		return fail("payload", err)
	}
	if err := validateHeaders(m.Headers); err != nil {
		return fail("headers", err)
	}
	if err := textcheck.Check(m.OrderingKey, maxOrderingKeyBytes, true); err != nil {
		return fail("ordering_key", err)
	}
	return nil
}

func headersJSON(h map[string]string) []byte {
	if len(h) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(h) // a map[string]string always marshals
	return b
}

func runAt(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()} }

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
		return Receipt{}, &txinbox.ValidationError{Field: "raw", Reason: fmt.Sprintf("is %d bytes, more than the limit of %d", len(u.Raw), c.cfg.MaxPayloadBytes)}
	}
	reason := strings.ToValidUTF8(u.Reason, "?")
	var row sqlc.InsertDeadRow
	err := c.inGeneration(ctx, tx, u.Consumer, func() (bool, error) {
		var err error
		row, err = schemasql.Queries.InsertDead(ctx, c.st.Wrap(tx), sqlc.InsertDeadParams{
			Consumer: u.Consumer, Key: u.Key, Kind: u.Kind, Raw: u.Raw, Headers: string(headersJSON(u.Headers)),
			LastError: pgtype.Text{String: strings.ReplaceAll(reason, "\x00", ""), Valid: true},
		})
		return row.Retry, err
	})
	if err != nil {
		return Receipt{}, translateError(err)
	}
	if row.ID == 0 {
		return Receipt{Outcome: Duplicate, State: StateDead}, nil
	}
	return Receipt{ID: row.ID, Outcome: Inserted, State: StateDead}, nil
}

// maxGenerationRounds bounds the runs of a statement that reports retry (see inGeneration): each
// round after the first needs a rotation committed during the previous one.
const maxGenerationRounds = 4

// inGeneration runs stmt, a statement that inserts into the slot of consumer's generation (00006),
// until it reports that it did its work (retry false). A statement reports retry, having written
// nothing, when consumer has no generation row yet or a rotation committed after the statement's
// snapshot; then the consumer is registered (RegisterConsumer, a no-op when it has its row) and stmt
// runs again, with a newer snapshot under READ COMMITTED. Under REPEATABLE READ and SERIALIZABLE a
// rotation fails the statement with a serialization error instead.
//
// A consumer new to this Client is registered before its first statement, so that the registration's
// lock of inbox_ring comes before any lock of the inbox table in the transaction, as in a rotation:
// registering after a statement on inbox could deadlock with a rotation (which then fails, and runs
// again at the next pass). A registration rolled back with the caller's transaction is made again by
// the retry.
func (c *Client) inGeneration(ctx context.Context, db sqlc.DBTX, consumer string, stmt func() (retry bool, err error)) error {
	if _, ok := c.registered.Load(consumer); !ok {
		if err := c.register(ctx, db, consumer); err != nil {
			return err
		}
		c.registered.Store(consumer, struct{}{})
	}
	for round := 0; ; round++ {
		retry, err := stmt()
		if err != nil || !retry {
			return err
		}
		if round+1 >= maxGenerationRounds {
			return fmt.Errorf("txinbox: consumer %q: %d generation rotations while receiving; receive again", consumer, round+1)
		}
		if err := c.register(ctx, db, consumer); err != nil {
			return err
		}
	}
}

// register gives consumer its generation row if it has none (LockRing, RegisterConsumer), in one
// transaction: db's, or one of its own.
func (c *Client) register(ctx context.Context, db sqlc.DBTX, consumer string) error {
	return inTx(ctx, db, func(db sqlc.DBTX) error {
		gen, err := schemasql.Queries.LockRing(ctx, c.st.Wrap(db))
		if err != nil {
			return err
		}
		return schemasql.Queries.RegisterConsumer(ctx, c.st.Wrap(db), consumer, gen)
	})
}
