// Package api is the HTTP API of the ledger example.
//
//	POST /v1/events          an OrderPaid event, stored in the inbox (key = event_id) and credited by a
//	                         worker: 202 new, 200 duplicate, 422 event_id reused for another event,
//	                         400 invalid body (problem+json listing every invalid field). Concurrent
//	                         requests' events share statements and commits (Config.CoalesceMax).
//	POST /v1/credits         a synchronous credit, {account_id, amount_cents}, with an Idempotency-Key
//	                         header (package idempotency): 201 with the new entry; a retry with the same
//	                         key gets the stored response (Idempotent-Replayed: true).
//	GET  /v1/accounts/{id}   the balance, entry count and newest entries of an account (?limit=, default
//	                         20, at most 1000), read in one snapshot in which the balance is checked
//	                         against the sum of the entries (500 if they differ).
//	GET  /healthz            200 when the database answers, 503 otherwise.
//
// Errors are RFC 9457 problem documents (application/problem+json).
package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/idempotency"
	"github.com/txinbox/txinbox/inbox"
)

// DB is what the API needs from the database: a *pgxpool.Pool.
type DB interface {
	txinbox.DB
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Ping(ctx context.Context) error
}

// Config configures the API.
type Config struct {
	// DB is the database (a *pgxpool.Pool). Required.
	DB DB
	// Schema holds the inbox and ledger tables. Default: "public".
	Schema string
	// Wake, if set, is called after a new event is stored (worker.Pool.Wake), so that idle workers
	// claim it before their next poll.
	Wake func()
	// Logger receives unexpected errors. Default: slog.Default().
	Logger *slog.Logger
	// CoalesceMax is the inbox.Config.CoalesceMax of POST /v1/events: concurrent requests' events
	// share one statement and one commit, up to this many (group commit). Default: 0, txinbox's
	// default (64); 1 turns coalescing off (a statement and a commit per
	// request).
	CoalesceMax int
	// Tracer is the txinbox.Store.Tracer of the API's inbox, idempotency keys and outbox: package
	// metrics' counts every receive of POST /v1/events; package txotel's traces, and POST /v1/credits
	// then records its request's trace context with the AccountCredited event it publishes (combine
	// both with txinbox.Tracers). Default: none.
	Tracer txinbox.OperationTracer
	// TracerProvider, if set, makes a server span for every request, named by its route
	// ("POST /v1/credits"; the method alone for a request no route matches), a child of the W3C trace
	// context of its traceparent header if it has one; the request's handlers run under it. Default:
	// no request spans.
	TracerProvider trace.TracerProvider
}

// Server serves the API. It is an http.Handler.
type Server struct {
	cfg    Config
	inbox  *inbox.Client
	ledger *ledger.Ledger
	mux    *http.ServeMux
	tracer trace.Tracer // nil: no request spans
}

// New returns the API's handler. Idempotency keys of POST /v1/credits are scoped by caller: the
// SHA-256 of the Authorization header, or "anonymous" without one (this example has no
// authentication).
func New(cfg Config) (*Server, error) {
	if cfg.Schema == "" {
		cfg.Schema = txinbox.DefaultSchema
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Wake == nil {
		cfg.Wake = func() {}
	}
	store := txinbox.Store{DB: cfg.DB, Schema: cfg.Schema, Tracer: cfg.Tracer, Logger: cfg.Logger}
	ic, err := inbox.New(store, inbox.Config{MaxPayloadBytes: MaxBodyBytes, CoalesceMax: cfg.CoalesceMax})
	if err != nil {
		return nil, err
	}
	l, err := ledger.New(store)
	if err != nil {
		return nil, err
	}
	authorization := idempotency.HeaderPrincipal("Authorization")
	idem, err := idempotency.New(store, idempotency.Config{
		Principal: func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") == "" {
				return "anonymous", nil
			}
			return authorization(r)
		}})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, inbox: ic, ledger: l, mux: http.NewServeMux()}
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer("github.com/txinbox/txinbox/examples/ledger/internal/api")
	}
	s.mux.HandleFunc("POST /v1/events", s.postEvent)
	s.mux.Handle("POST /v1/credits", idem.Handler(http.HandlerFunc(s.postCredit)))
	s.mux.HandleFunc("GET /v1/accounts/{id}", s.getAccount)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.tracer == nil {
		s.mux.ServeHTTP(w, r)
		return
	}
	name := r.Method
	if _, pattern := s.mux.Handler(r); pattern != "" {
		name = pattern
	}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
	defer span.End()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.mux.ServeHTTP(sw, r.WithContext(ctx))
	span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
	if sw.status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(sw.status))
	}
}

// statusWriter records the status code of a response, for its request's span.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// EventResponse is the body of a 202 or 200 answer to POST /v1/events.
type EventResponse struct {
	EventID string `json:"event_id"`
	// Status is "accepted" (202: stored, to be credited) or "duplicate" (200: stored already).
	Status string `json:"status"`
	// MessageID is the inbox message holding the event.
	MessageID int64 `json:"message_id"`
	// State is the stored message's state: pending, processing, completed or dead.
	State string `json:"state"`
	// Result is the credit applied (ledger.Applied), once the message is completed.
	Result json.RawMessage `json:"result,omitempty"`
}

func (s *Server) postEvent(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		return
	}
	ev, problems := decodeEvent(body)
	if len(problems) > 0 {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidBody, "Invalid OrderPaid event",
			"The body must be a JSON object with event_id, order_id, account_id, amount_cents (a positive integer) and occurred_at (RFC 3339), and nothing else.",
			problems...)
		return
	}
	payload, _ := json.Marshal(ev) // a struct of strings, an integer and a time always marshals
	rc, err := s.inbox.Receive(r.Context(), inbox.Message{
		Consumer: ledger.Consumer, Key: ev.EventID, Kind: ledger.KindOrderPaid, Payload: payload,
		// Events of one account are credited one at a time, in arrival order: two workers never
		// contend for one account row, so batches cannot deadlock on balances.
		OrderingKey: ev.AccountID,
	})
	switch {
	case errors.Is(err, inbox.ErrKeyConflict):
		writeProblem(w, http.StatusUnprocessableEntity, ProblemEventConflict, "event_id reused",
			"An event with this event_id was received with different content. Event ids must identify one event.")
	case errors.Is(err, txinbox.ErrInvalidMessage):
		writeProblem(w, http.StatusBadRequest, ProblemInvalidBody, "Invalid OrderPaid event", err.Error())
	case err != nil:
		s.unavailable(w, r, "store event", err)
	case rc.Outcome == inbox.Inserted:
		s.cfg.Wake()
		writeJSON(w, http.StatusAccepted, EventResponse{EventID: ev.EventID, Status: "accepted", MessageID: rc.ID, State: string(rc.State)})
	default:
		writeJSON(w, http.StatusOK, EventResponse{EventID: ev.EventID, Status: "duplicate", MessageID: rc.ID,
			State: string(rc.State), Result: rc.Result})
	}
}

// CreditResponse is the body of a 201 answer to POST /v1/credits.
type CreditResponse struct {
	EntryID      int64  `json:"entry_id"`
	AccountID    string `json:"account_id"`
	AmountCents  int64  `json:"amount_cents"`
	BalanceCents int64  `json:"balance_cents"`
}

func (s *Server) postCredit(w http.ResponseWriter, r *http.Request) {
	tx, ok := idempotency.Tx(r.Context())
	if !ok { // cannot happen: the route requires a key and the middleware fails closed
		writeProblem(w, http.StatusInternalServerError, ProblemInternal, "Internal error", "No idempotency transaction.")
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		return
	}
	c, problems := decodeCredit(body)
	if len(problems) > 0 {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidBody, "Invalid credit",
			"The body must be a JSON object with account_id and amount_cents (a positive integer), and nothing else.", problems...)
		return
	}
	key, _ := idempotency.ParseKey(r.Header.Get(idempotency.HeaderKey)) // the middleware validated it
	a, err := s.ledger.Apply(r.Context(), tx, ledger.Credit{AccountID: c.AccountID, AmountCents: c.AmountCents,
		Source: ledger.SourceCredit, IdempotencyKey: key})
	if err != nil {
		s.unavailable(w, r, "apply credit", err)
		return
	}
	w.Header().Set("Location", "/v1/accounts/"+a.AccountID)
	writeJSON(w, http.StatusCreated, CreditResponse{EntryID: a.EntryID, AccountID: a.AccountID, AmountCents: a.AmountCents, BalanceCents: a.BalanceCents})
}

// AccountResponse is the body of GET /v1/accounts/{id}.
type AccountResponse struct {
	AccountID    string `json:"account_id"`
	BalanceCents int64  `json:"balance_cents"`
	// Entries is the number of entries of the account; BalanceCents is their sum.
	Entries int64 `json:"entries"`
	// RecentEntries are the newest entries, newest first (at most ?limit).
	RecentEntries []ledger.Entry `json:"recent_entries"`
	UpdatedAt     time.Time      `json:"updated_at"`
}

func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var fe *ledger.FieldError
	if err := ledger.ValidateAccountID(id); errors.As(err, &fe) {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidAccount, "Invalid account id", fe.Detail)
		return
	}
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			writeProblem(w, http.StatusBadRequest, ProblemInvalidBody, "Invalid limit", "limit must be an integer from 0 to 1000.")
			return
		}
		limit = n
	}
	a, entries, err := s.ledger.Account(r.Context(), s.cfg.DB, id, limit)
	switch {
	case errors.Is(err, ledger.ErrAccountNotFound):
		writeProblem(w, http.StatusNotFound, ProblemAccountNotFound, "Account not found", "The account "+id+" has no entry.")
	case errors.Is(err, ledger.ErrBalanceMismatch):
		s.cfg.Logger.Error("ledger api: read account", "err", err)
		writeProblem(w, http.StatusInternalServerError, ProblemInternal, "Internal error", "The account's balance could not be verified.")
	case err != nil:
		s.unavailable(w, r, "read account", err)
	default:
		if entries == nil {
			entries = []ledger.Entry{}
		}
		writeJSON(w, http.StatusOK, AccountResponse{AccountID: a.AccountID, BalanceCents: a.BalanceCents, Entries: a.Entries,
			RecentEntries: entries, UpdatedAt: a.UpdatedAt})
	}
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.DB.Ping(ctx); err != nil {
		writeProblem(w, http.StatusServiceUnavailable, ProblemUnavailable, "Database unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// unavailable answers a database failure: 503 when the database could not be reached (retry), 500
// when it refused the statement. Nothing was stored either way.
func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, what string, err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		s.cfg.Logger.Error("ledger api: "+what, "err", err)
		writeProblem(w, http.StatusInternalServerError, ProblemInternal, "Internal error", "The request was not applied.")
		return
	}
	s.cfg.Logger.Warn("ledger api: "+what, "err", err)
	writeProblem(w, http.StatusServiceUnavailable, ProblemUnavailable, "Database unavailable",
		"The request was not stored. Retry it (with the same event_id or Idempotency-Key).")
}
