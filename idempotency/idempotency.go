package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// Defaults of Config (documented on its fields).
const (
	defaultExpiry           = 24 * time.Hour
	defaultLease            = time.Minute
	defaultRetryAfter       = time.Second
	defaultMaxRequestBytes  = 1 << 20
	defaultMaxResponseBytes = 1 << 20
	defaultStoreTimeout     = 10 * time.Second
)

// Limits on what a request is scoped by, so that every accepted scope can be stored (the four
// columns form the table's unique index, whose entries PostgreSQL limits to about 2.7 kB); documented
// on Config.Principal and Config.Route.
const (
	maxPrincipalBytes = 512
	maxRouteBytes     = 1024
)

// defaultMethods is Config.Methods when it is nil.
var defaultMethods = []string{http.MethodPost, http.MethodPatch}

// defaultStoredHeaders is Config.StoredHeaders when it is nil.
var defaultStoredHeaders = []string{
	"Content-Type", "Content-Encoding", "Content-Language", "Content-Location", "Location",
	"ETag", "Last-Modified",
}

// errNoPrincipal is returned by the function of HeaderPrincipal when the request lacks the header.
var errNoPrincipal = errors.New("idempotency: no credentials in the request")

// Config configures a Middleware. Only Principal is required.
type Config struct {
	// Principal returns the identity of the caller (a user or tenant id, or a hash of the
	// credentials): keys are only ever looked up within one principal. An error answers 401
	// (ProblemUnauthenticated) without running the handler, and so does an empty principal (it would
	// put every such caller in one shared scope) or one that cannot be stored (not valid UTF-8, a
	// NUL, longer than 512 bytes). Required; see HeaderPrincipal.
	Principal func(*http.Request) (string, error)

	// Route returns the route the key is scoped to, together with the principal and the method.
	// Default: r.Pattern when set (the handler is registered on an http.ServeMux), otherwise
	// r.URL.Path. A route that cannot be stored (not valid UTF-8, a NUL, such as a path with %FF or
	// %00, or longer than 1024 bytes) answers 400 (ProblemRequestInvalid) without running the
	// handler or touching the store.
	Route func(*http.Request) string

	// Methods are the request methods the middleware applies to. Requests with other methods pass
	// through untouched (and Tx reports false). Default: POST and PATCH, the methods that are not
	// idempotent by nature.
	Methods []string

	// KeyOptional lets requests without an Idempotency-Key header pass through untouched (and Tx
	// reports false). Default false: such requests are answered 400 (ProblemKeyMissing).
	KeyOptional bool

	// Fingerprint returns the fingerprint stored with a key; a retry whose fingerprint differs is
	// answered 422 (ProblemKeyReused). body is the whole request body (r.Body must not be read). An
	// error answers 400 (ProblemRequestInvalid) with the error text as detail. Default: the SHA-256
	// of the method, the request target (path and query, as r.URL.RequestURI) and the body,
	// separated by newlines.
	Fingerprint func(r *http.Request, body []byte) ([]byte, error)

	// Expiry is how long a key is kept, from the moment its request was accepted. After it the key
	// is treated as absent (a new request with it runs), whether or not the schema's maintainer (package
	// maintain) has deleted it yet.
	// Default: 24 hours.
	Expiry time.Duration

	// Lease bounds how long a key stays in flight when its request is not running any more but
	// could not release it (the process died): after the lease a retry takes the key over. A
	// request that is running holds its key locked, so a long handler is never taken over,
	// whatever its duration. Default: 1 minute.
	Lease time.Duration

	// RetryAfter is the Retry-After of 409 (in flight) and 503 (store unavailable) answers,
	// rounded up to whole seconds. Default: 1 second.
	RetryAfter time.Duration

	// StoreStatus reports whether a response with status is stored. A stored response commits the
	// handler's transaction with it and is replayed to every retry; a response that is not stored
	// is sent once, its transaction is rolled back and the key released, so a retry runs the
	// handler again. Default: status < 500 (errors of the client are stored, server errors are
	// not).
	StoreStatus func(status int) bool

	// StoredHeaders are the response headers stored and replayed (canonicalised). The original
	// response carries every header the handler set. Default: the headers that describe the stored
	// body or the created resource: Content-Type, Content-Encoding, Content-Language,
	// Content-Location, Location, ETag and Last-Modified.
	StoredHeaders []string

	// MaxRequestBytes is the largest request body accepted; a larger one is answered 413
	// (ProblemRequestTooLarge) without running the handler. Default: 1 MiB.
	MaxRequestBytes int64

	// MaxResponseBytes is the largest response body the handler may write. A larger one cannot be
	// stored: the handler's Write returns ErrResponseTooLarge, the transaction is rolled back, the
	// key is released and the client gets 500 (ProblemResponseTooLarge). Nothing is committed, so
	// nothing can run twice; set the limit above your largest response. Default: 1 MiB.
	MaxResponseBytes int

	// FailOpen runs the request without idempotency protection (no stored key, and Tx reports
	// false) when the store cannot be reached to look the key up. Default false (fail closed): such
	// requests are answered 503 (ProblemStoreUnavailable). It does not apply to a schema without the
	// idempotency_keys table (migrations not run): whatever FailOpen says, such a request is answered
	// 500 (ProblemNotMigrated) and its handler does not run, so that a missing migration is not
	// mistaken for an outage and every request run unprotected.
	FailOpen bool

	// StoreTimeout bounds the statements that end a request (store, commit, roll back, release).
	// They run even when the client has gone, so that a finished response is stored. Default: 10
	// seconds.
	StoreTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Principal == nil {
		return c, &txinbox.ConfigError{Field: "Principal", Reason: "is required (keys are scoped by caller; see HeaderPrincipal)"}
	}
	if c.Route == nil {
		c.Route = defaultRoute
	}
	if c.Methods == nil {
		c.Methods = defaultMethods
	}
	if c.Fingerprint == nil {
		c.Fingerprint = defaultFingerprint
	}
	if c.StoreStatus == nil {
		c.StoreStatus = func(status int) bool { return status < 500 }
	}
	if c.StoredHeaders == nil {
		c.StoredHeaders = defaultStoredHeaders
	}
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"Expiry", &c.Expiry, defaultExpiry},
		{"Lease", &c.Lease, defaultLease},
		{"RetryAfter", &c.RetryAfter, defaultRetryAfter},
		{"StoreTimeout", &c.StoreTimeout, defaultStoreTimeout},
	} {
		if *d.v < 0 {
			return c, &txinbox.ConfigError{Field: d.field, Reason: "must not be negative"}
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	switch {
	case c.MaxRequestBytes < 0:
		return c, &txinbox.ConfigError{Field: "MaxRequestBytes", Reason: "must not be negative"}
	case c.MaxRequestBytes == 0:
		c.MaxRequestBytes = defaultMaxRequestBytes
	}
	switch {
	case c.MaxResponseBytes < 0:
		return c, &txinbox.ConfigError{Field: "MaxResponseBytes", Reason: "must not be negative"}
	case c.MaxResponseBytes == 0:
		c.MaxResponseBytes = defaultMaxResponseBytes
	}
	return c, nil
}

// defaultRoute returns r.Pattern when it is set, otherwise r.URL.Path.
func defaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.Path
}

// defaultFingerprint is Config.Fingerprint when it is nil (documented there).
func defaultFingerprint(r *http.Request, body []byte) ([]byte, error) {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{'\n'})
	h.Write([]byte(r.URL.RequestURI()))
	h.Write([]byte{'\n'})
	h.Write(body)
	return h.Sum(nil), nil
}

// HeaderPrincipal returns a Config.Principal that identifies the caller by the value of the request
// header name (usually "Authorization"): the principal is "sha256:" and the hex SHA-256 of the value,
// so credentials are never stored. A request without the header gets an error (answered 401).
func HeaderPrincipal(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", errNoPrincipal
		}
		sum := sha256.Sum256([]byte(v))
		return "sha256:" + hex.EncodeToString(sum[:]), nil
	}
}

// Middleware enforces the Idempotency-Key protocol on the handlers it wraps. It is safe for
// concurrent use.
type Middleware struct {
	db      txinbox.DB
	cfg     Config
	log     *slog.Logger // the Store's Logger: store failures, keys released after errors
	st      *schemasql.Schema
	schema  string
	methods map[string]bool
	headers []string
}

// statements returns the statement rewriter of schema.
func statements(schema string) *schemasql.Schema { return schemasql.New(schema) }

// New returns a Middleware storing keys through store.DB (usually a *pgxpool.Pool) in the
// idempotency_keys table of store.Schema (migration 00002, applied by package migrate). An invalid
// store or cfg returns a *[txinbox.ConfigError] (errors.Is [txinbox.ErrInvalidConfig]). Store failures
// and keys released after errors are logged to store.Logger. Expired keys
// are deleted by the schema's maintainer (package maintain), which every runner (package runner) runs.
// New does not touch the database: a schema without the table (migrations not run) is found by each
// request that looks a key up, answered ProblemNotMigrated (and logged), whatever Config.FailOpen
// says; once the schema is migrated, the next request works.
func New(store txinbox.Store, cfg Config) (*Middleware, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Middleware{db: store.DB, cfg: cfg, log: store.Logger, st: statements(store.Schema), schema: store.Schema, methods: map[string]bool{}}
	for _, meth := range cfg.Methods {
		m.methods[meth] = true
	}
	for _, h := range cfg.StoredHeaders {
		m.headers = append(m.headers, http.CanonicalHeaderKey(h))
	}
	return m, nil
}

// notMigratedDetail is the detail of ProblemNotMigrated.
const notMigratedDetail = "The idempotency store is not set up: its schema has no idempotency_keys table. " +
	"The service operator must run the txinbox migrations on it (migrate.Up, or the command \"txinbox migrate up\")."

type txKey struct{}

// Tx returns the transaction the middleware opened for the request of ctx. Do the request's
// database writes in it: they commit together with the stored response, or not at all. It reports
// false for requests the middleware passed through (other methods, no key with KeyOptional, store
// unreachable with FailOpen).
//
// The transaction supports every method of pgx.Tx: Exec, Query, QueryRow, SendBatch, CopyFrom,
// Prepare, LargeObjects and Conn all run in it; Begin starts a nested transaction (a savepoint)
// whose Commit and Rollback work as usual. Commit and Rollback of the returned transaction itself
// return txinbox.ErrTxManaged and do nothing. The transaction must not be ended any other way: not with a
// COMMIT or ROLLBACK statement, nor through Conn (Begin, Commit or pgx.BeginFunc on the *pgx.Conn
// send BEGIN and COMMIT, and that COMMIT commits the request's transaction). If the handler ends it
// anyway, its writes may be committed already and nothing can undo them: the middleware logs an
// error and stores the response whatever its status (StoreStatus is not asked), so that a retry
// replays it instead of running the handler again; a response larger than MaxResponseBytes then
// leaves the key in flight until its Lease ends.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// managedTx is the transaction Tx returns: the request's transaction with every method of pgx.Tx
// written out (no embedding), Commit and Rollback refused. A method pgx adds to pgx.Tx later breaks
// the build here (see the assertion below) until it is decided how it keeps to the transaction.
type managedTx struct {
	tx pgx.Tx
}

var _ pgx.Tx = managedTx{}

// Commit returns txinbox.ErrTxManaged and does nothing.
func (managedTx) Commit(context.Context) error { return txinbox.ErrTxManaged }

// Rollback returns txinbox.ErrTxManaged and does nothing.
func (managedTx) Rollback(context.Context) error { return txinbox.ErrTxManaged }

// Begin starts a nested transaction (a savepoint) in the request's transaction.
func (t managedTx) Begin(ctx context.Context) (pgx.Tx, error) { return t.tx.Begin(ctx) }

// CopyFrom copies rows in, in the request's transaction.
func (t managedTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.tx.CopyFrom(ctx, table, cols, src)
}

// SendBatch sends b in the request's transaction.
func (t managedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.tx.SendBatch(ctx, b)
}

// LargeObjects returns the large objects of the request's transaction.
func (t managedTx) LargeObjects() pgx.LargeObjects { return t.tx.LargeObjects() }

// Prepare prepares a statement on the request's connection.
func (t managedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.tx.Prepare(ctx, name, sql)
}

// Exec runs sql in the request's transaction.
func (t managedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.tx.Exec(ctx, sql, args...)
}

// Query runs sql in the request's transaction.
func (t managedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow runs sql in the request's transaction.
func (t managedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

// Conn returns the connection the request's transaction runs on. What is sent through it runs in
// that transaction, which it must not end (see Tx).
func (t managedTx) Conn() *pgx.Conn { return t.tx.Conn() }

// txEnded reports whether tx's connection is known to be outside any transaction: the handler ended
// the request's transaction itself (see Tx).
func txEnded(tx pgx.Tx) bool {
	c := tx.Conn()
	return c != nil && c.PgConn().TxStatus() == 'I'
}

// Handler wraps next. See the package documentation for the protocol.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
}

const (
	stateInFlight  = "in_flight"
	stateCompleted = "completed"
)

type request struct {
	principal, method, route, key string
	fingerprint                   []byte
}

func (m *Middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(HeaderKey)
	if len(values) == 0 {
		if m.cfg.KeyOptional {
			next.ServeHTTP(w, r)
			return
		}
		writeProblem(w, ProblemKeyMissing, "This endpoint requires an Idempotency-Key header, for example: Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\".", 0)
		return
	}
	key, err := ParseKey(strings.Join(values, ", "))
	if err != nil {
		var ke *invalidKeyError
		errors.As(err, &ke)
		writeProblem(w, ProblemKeyInvalid, ke.reason+". Send one key of 1 to 255 printable ASCII characters as a quoted string, for example: Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\".", 0)
		return
	}
	principal, err := m.cfg.Principal(r)
	if err == nil {
		err = storable(principal, maxPrincipalBytes)
		if err != nil {
			m.log.Warn("idempotency: Config.Principal returned an unusable principal: answered 401", "method", r.Method, "reason", err)
		}
	}
	if err != nil {
		writeProblem(w, ProblemUnauthenticated, "The caller could not be identified; idempotency keys are scoped by caller.", 0)
		return
	}
	route := m.cfg.Route(r)
	if err := storable(route, maxRouteBytes); err != nil {
		writeProblem(w, ProblemRequestInvalid, "The request target cannot be used as an idempotency scope: its route "+err.Error()+".", 0)
		return
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return
	}
	fp, err := m.cfg.Fingerprint(r, body)
	if err != nil {
		writeProblem(w, ProblemRequestInvalid, err.Error(), 0)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	req := request{principal: principal, method: r.Method, route: route, key: key, fingerprint: fp}

	c, err := m.claim(r.Context(), req)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client has gone: nothing was claimed, and nobody reads an answer
		}
		if err = schemasql.Err(err); errors.Is(err, txinbox.ErrNotMigrated) {
			// Not a store that cannot be reached: one set up wrong, which no retry mends. FailOpen
			// does not apply: it would run every request unprotected until someone noticed.
			m.log.Error("idempotency: the schema has no idempotency_keys table: answered ProblemNotMigrated (FailOpen does not apply)",
				"schema", m.schema, "method", req.method, "route", req.route, "error", err)
			writeProblem(w, ProblemNotMigrated, notMigratedDetail, 0)
			return
		}
		if m.cfg.FailOpen {
			m.log.Warn("idempotency: store unavailable, running the request without idempotency (FailOpen)",
				"method", req.method, "route", req.route, "error", err)
			next.ServeHTTP(w, r)
			return
		}
		m.log.Error("idempotency: store unavailable", "method", req.method, "route", req.route, "error", err)
		writeProblem(w, ProblemStoreUnavailable, "The idempotency store could not be reached. Retry the request with the same Idempotency-Key.", m.cfg.RetryAfter)
		return
	}
	switch c.outcome {
	case outcomeReplay:
		var h http.Header
		if len(c.headers) > 0 {
			if err := json.Unmarshal(c.headers, &h); err != nil {
				m.log.Error("idempotency: stored headers unreadable", "error", err)
			}
		}
		writeResponse(w, c.status, h, c.body, true)
	case outcomeReused:
		writeProblem(w, ProblemKeyReused, "This Idempotency-Key was already used for a different request (method, target or body). Use a new key for a new request.", 0)
	case outcomeInFlight:
		writeProblem(w, ProblemKeyInFlight, "A request with this Idempotency-Key is still being processed. Retry later to get its response.", m.cfg.RetryAfter)
	case outcomeOwned:
		m.run(next, w, r, req, c)
	}
}

// storable checks a principal or route: 1 to maxBytes bytes of valid UTF-8 without NUL (what a text
// column of the unique index can hold).
func storable(s string, maxBytes int) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > maxBytes:
		return fmt.Errorf("is %d bytes, more than the limit of %d", len(s), maxBytes)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("contains NUL")
	}
	return nil
}

func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := m.cfg.MaxRequestBytes
	tooLarge := fmt.Sprintf("The request body is larger than the limit of %d bytes.", limit)
	if r.ContentLength > limit {
		writeProblem(w, ProblemRequestTooLarge, tooLarge, 0)
		return nil, false
	}
	if r.Body == nil {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		writeProblem(w, ProblemRequestInvalid, "The request body could not be read.", 0)
		return nil, false
	}
	if int64(len(body)) > limit {
		writeProblem(w, ProblemRequestTooLarge, tooLarge, 0)
		return nil, false
	}
	return body, true
}

type outcome int

const (
	outcomeOwned    outcome = iota + 1 // this request runs the handler
	outcomeReplay                      // completed: replay the stored response
	outcomeReused                      // stored with another fingerprint: 422
	outcomeInFlight                    // another request holds the key: 409
)

type claimed struct {
	outcome
	id, token int64  // outcomeOwned
	status    int    // outcomeReplay
	headers   []byte // outcomeReplay
	body      []byte // outcomeReplay
}

// claim finds out what to do with req: run it (the key is now ours, committed as in_flight), replay
// the stored response, or refuse. A non-nil error means the store could not be used.
func (m *Middleware) claim(ctx context.Context, req request) (claimed, error) {
	db := m.st.Wrap(m.db)
	lease, expiry := m.cfg.Lease.Seconds(), m.cfg.Expiry.Seconds()
	lockedToken := int64(-1) // token of a row we could not take over: held by a running handler
	for range 4 {
		row, err := schemasql.Queries.IdemClaim(ctx, db, sqlc.IdemClaimParams{
			Principal: req.principal, Method: req.method, Route: req.route, Key: req.key,
			Fingerprint: req.fingerprint, LeaseSeconds: lease, ExpirySeconds: expiry,
		})
		if err == nil {
			return claimed{outcome: outcomeOwned, id: row.ID, token: row.Token}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return claimed{}, err
		}
		rec, err := schemasql.Queries.IdemLookup(ctx, db, sqlc.IdemLookupParams{
			Principal: req.principal, Method: req.method, Route: req.route, Key: req.key,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			continue // deleted since the insert saw it (released or cleaned): insert again
		}
		if err != nil {
			return claimed{}, err
		}
		if rec.Token == lockedToken && rec.Expired {
			return claimed{outcome: outcomeInFlight}, nil // locked: a running handler (or the cleaner) holds it
		}
		abandoned := rec.State == stateInFlight && rec.LeaseOver
		if (rec.Expired || abandoned) && rec.Token != lockedToken {
			// Absent by policy: take the row over, unless a running handler holds it locked.
			t, err := schemasql.Queries.IdemTakeOver(ctx, db, sqlc.IdemTakeOverParams{
				Fingerprint: req.fingerprint, LeaseSeconds: lease, ExpirySeconds: expiry,
				ID: rec.ID, Token: rec.Token,
			})
			if err == nil {
				return claimed{outcome: outcomeOwned, id: t.ID, token: t.Token}, nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return claimed{}, err
			}
			lockedToken = rec.Token
			continue // changed since read, or locked: read it again
		}
		if !bytes.Equal(rec.Fingerprint, req.fingerprint) {
			return claimed{outcome: outcomeReused}, nil
		}
		if rec.State == stateCompleted {
			return claimed{outcome: outcomeReplay, status: int(rec.Status.Int32), headers: rec.Headers, body: rec.Body}, nil
		}
		return claimed{outcome: outcomeInFlight}, nil
	}
	return claimed{outcome: outcomeInFlight}, nil
}

// run executes the handler of an owned key in a transaction that locks the key and stores the
// response, and sends the response once that transaction has committed.
func (m *Middleware) run(next http.Handler, w http.ResponseWriter, r *http.Request, req request, c claimed) {
	ctx := r.Context()
	log := m.log.With("method", req.method, "route", req.route)
	tx, err := m.db.Begin(ctx)
	if err != nil {
		m.release(ctx, c, log)
		log.Error("idempotency: begin", "error", err)
		writeProblem(w, ProblemStoreUnavailable, "The idempotency store could not be reached. Retry the request with the same Idempotency-Key.", m.cfg.RetryAfter)
		return
	}
	ended := false
	end := func() { // rolls back and releases the key; called on every path that does not commit
		ended = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.StoreTimeout)
		defer cancel()
		_ = tx.Rollback(sctx)
		m.release(sctx, c, log)
	}
	defer func() {
		if !ended { // the handler panicked: the panic goes on once the key is released
			end()
		}
	}()

	if _, err := schemasql.Queries.IdemLock(ctx, m.st.Wrap(tx), c.id, c.token); err != nil {
		if errors.Is(err, pgx.ErrNoRows) { // our lease ended before we got here, and a retry took the key over
			ended = true
			_ = tx.Rollback(context.WithoutCancel(ctx))
			writeProblem(w, ProblemKeyInFlight, "A request with this Idempotency-Key is still being processed. Retry later to get its response.", m.cfg.RetryAfter)
			return
		}
		end()
		log.Error("idempotency: lock key", "error", err)
		writeProblem(w, ProblemStoreUnavailable, "The idempotency store could not be reached. Retry the request with the same Idempotency-Key.", m.cfg.RetryAfter)
		return
	}

	rec := newRecorder(m.cfg.MaxResponseBytes)
	next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, txKey{}, pgx.Tx(managedTx{tx}))))
	rec.finish()

	// A handler that ended the transaction itself may have committed its writes: the key must not be
	// released, or a retry would run them again (see Tx).
	escaped := txEnded(tx)
	if escaped {
		log.Error("idempotency: the handler ended the request's transaction itself (through Tx's Conn, or a COMMIT or ROLLBACK statement): its writes may be committed; the response is stored whatever its status", "status", rec.status)
	}
	if rec.overflow {
		if escaped {
			ended = true // keep the key in flight: it is freed when its lease ends
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.StoreTimeout)
			_ = tx.Rollback(sctx) // rolls back nothing any more, but gives the connection back
			cancel()
			log.Error("idempotency: response body larger than MaxResponseBytes after the handler ended the transaction: not stored, key left in flight until its lease ends", "status", rec.status, "limit", m.cfg.MaxResponseBytes)
		} else {
			end()
			log.Error("idempotency: response body larger than MaxResponseBytes: rolled back, key released", "status", rec.status, "limit", m.cfg.MaxResponseBytes)
		}
		writeProblem(w, ProblemResponseTooLarge, "The response was too large to be stored, so the request was not applied. Contact the service operator.", 0)
		return
	}
	if !escaped && !m.cfg.StoreStatus(rec.status) {
		end()
		writeResponse(w, rec.status, rec.sent, rec.body, false)
		return
	}

	stored := http.Header{}
	for _, k := range m.headers {
		if v, ok := rec.sent[k]; ok {
			stored[k] = v
		}
	}
	headers, _ := json.Marshal(stored)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.StoreTimeout)
	defer cancel()
	n, err := schemasql.Queries.IdemComplete(sctx, m.st.Wrap(tx), sqlc.IdemCompleteParams{
		Status: pgtype.Int4{Int32: int32(rec.status), Valid: true}, Headers: string(headers), Body: rec.body,
		ID: c.id, Token: c.token,
	})
	if err == nil && n != 1 {
		err = errors.New("idempotency: key no longer held") // cannot happen while the lock is held
	}
	if err == nil {
		err = tx.Commit(sctx)
	}
	if err != nil {
		end()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			log.Error("idempotency: store response: transaction rejected, rolled back, key released", "error", err)
			writeProblem(w, ProblemStoreFailed, "The request could not be committed, so it was not applied.", 0)
			return
		}
		log.Error("idempotency: store response", "error", err)
		writeProblem(w, ProblemStoreUnavailable, "The response could not be stored. Retry the request with the same Idempotency-Key.", m.cfg.RetryAfter)
		return
	}
	ended = true
	writeResponse(w, rec.status, rec.sent, rec.body, false)
}

// release deletes the in-flight row of a request that committed nothing. A failure is logged: the
// row is then freed by its lease.
func (m *Middleware) release(ctx context.Context, c claimed, log *slog.Logger) {
	if _, err := schemasql.Queries.IdemRelease(ctx, m.st.Wrap(m.db), c.id, c.token); err != nil {
		log.Warn("idempotency: release key (it is freed when its lease ends)", "error", err, "lease", m.cfg.Lease)
	}
}
