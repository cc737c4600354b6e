package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/adapters/internal/run"
)

// ReceiverConfig configures a [Receiver]. Secret, Sink.Store.DB and Sink.Consumer are required;
// every other zero field takes the documented default. [NewReceiver] returns a *txinbox.ConfigError
// naming the field that is missing or wrong.
type ReceiverConfig struct {
	// Secret verifies every request's signature: the sender's Config.Secret ("whsec_" + base64).
	Secret string
	// Tolerance is how far a request's webhook-timestamp may be from the receiver's clock (see
	// [Verify]). Default: 5 minutes.
	Tolerance time.Duration
	// Sink says where the requests are stored and how they become inbox messages (see
	// adapters.Sink.Store). Sink.Key default: the CloudEvents id (ce-id), else the webhook-id header
	// (adapters.FirstOf(adapters.CloudEventID(), adapters.Header(HeaderID))). The kind is the
	// CloudEvents type (ce-type), else the Sink.KindHeader header, else Sink.DefaultKind; the ordering
	// key the CloudEvents partitionkey (ce-partitionkey) unless Sink.OrderingKey is set.
	Sink adapters.SinkConfig
	// MaxBodyBytes is the largest request body read: a larger one is answered 413 and not stored
	// (its signature cannot be checked without reading it whole). Default: Sink.MaxPayloadBytes
	// (1 MiB when that is zero).
	MaxBodyBytes int
	// WriteTimeout bounds storing one request. Default: 30s.
	WriteTimeout time.Duration
}

// Receiver is an http.Handler that stores the webhooks of a [Publisher] (or of any Standard Webhooks
// sender, with or without the CloudEvents HTTP binding's ce- headers) into a txinbox inbox, through an
// adapters.Sink: the receiving end of an outbox → webhook → inbox pair. Make it with [NewReceiver]
// and mount it on the route the sender's endpoint names. It is safe for concurrent use.
//
// Each POST request is one message, handled in this order:
//
//	not a POST                            405, with Allow: POST
//	a body over MaxBodyBytes              413, nothing stored (the sender's event is dead at once)
//	a signature that Verify refuses       401, nothing stored: a missing webhook-* header, a
//	                                      timestamp outside Tolerance, no matching v1 signature
//	stored, in a transaction committed    202 Accepted
//	  before the answer
//	a duplicate (its key stored before    200 OK
//	  with the same kind and payload)
//	undecodable (a body that is not       202 Accepted: stored dead with its raw bytes, as every
//	  JSON, no kind), stored dead         Sink does, so that the sender stops
//	its key stored with another kind or   409, nothing stored, the stored message kept (the sender's
//	  payload                             event is dead at once, with this answer as its error)
//	the inbox's schema has no txinbox     500, nothing stored: run the migrations (the log names
//	  tables (migrations not run)         txinbox.ErrNotMigrated)
//	the database failed                   503, nothing stored: the sender retries
//
// Errors are RFC 9457 problem documents (application/problem+json) whose type is one of the Problem
// constants. The request becomes an adapters.Record with Source = the request's path, MessageID =
// webhook-id, Headers = the request's headers with lower-case names (values of a repeated header
// joined with ", "), but for the connection's own (Content-Length, Transfer-Encoding, Connection,
// Accept-Encoding, ...), credentials (Authorization, Cookie) and webhook-signature, CloudEvent = the
// ce- headers, percent-decoded, with Content-Type as datacontenttype (the CloudEvents HTTP
// binding), Body = the body and Raw = the *http.Request.
type Receiver struct {
	cfg  ReceiverConfig
	sink *adapters.Sink
}

// NewReceiver checks cfg and returns a Receiver.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if _, err := decodeSecret(cfg.Secret); err != nil {
		return nil, &txinbox.ConfigError{Field: "Secret", Reason: err.Error()}
	}
	switch {
	case cfg.Tolerance < 0:
		return nil, &txinbox.ConfigError{Field: "Tolerance", Reason: "must not be negative"}
	case cfg.Tolerance == 0:
		cfg.Tolerance = defaultTolerance
	}
	switch {
	case cfg.WriteTimeout < 0:
		return nil, &txinbox.ConfigError{Field: "WriteTimeout", Reason: "must not be negative"}
	case cfg.WriteTimeout == 0:
		cfg.WriteTimeout = run.DefaultWriteTimeout
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, &txinbox.ConfigError{Field: "MaxBodyBytes", Reason: "must not be negative"}
	}
	if cfg.Sink.Key == nil {
		cfg.Sink.Key = adapters.FirstOf(adapters.CloudEventID(), adapters.Header(HeaderID))
	}
	sink, err := adapters.NewSink(cfg.Sink)
	if err != nil {
		return nil, err
	}
	cfg.Sink = sink.Config()
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = cfg.Sink.MaxPayloadBytes
	}
	return &Receiver{cfg: cfg, sink: sink}, nil
}

// Stats returns what the receiver did so far: the Sink's counts, each request a batch of one, and
// Acked counting the requests answered 2xx.
func (rc *Receiver) Stats() adapters.Stats { return rc.sink.Stats() }

// ServeHTTP handles one request (see [Receiver]).
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, ProblemMethodNotAllowed, r.Method+" is not allowed: webhooks are POSTed")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(rc.cfg.MaxBodyBytes)))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeProblem(w, ProblemRequestTooLarge, "the body is larger than "+strconv.Itoa(rc.cfg.MaxBodyBytes)+" bytes")
			return
		}
		writeProblem(w, ProblemRequestInvalid, "reading the body: "+err.Error())
		return
	}
	if err := Verify(rc.cfg.Secret, r.Header, body, rc.cfg.Tolerance); err != nil {
		writeProblem(w, ProblemUnauthenticated, err.Error())
		return
	}
	rec := record(r, body)
	ctx, cancel := context.WithTimeout(r.Context(), rc.cfg.WriteTimeout)
	defer cancel()
	res, err := rc.sink.Store(ctx, []*adapters.Record{rec})
	if errors.Is(err, txinbox.ErrNotMigrated) {
		rc.cfg.Sink.Store.Logger.Error("txinbox/webhook: cannot store the request: the inbox's schema has no txinbox tables; answered 500",
			"path", rec.Source, "id", rec.MessageID, "err", err)
		writeProblem(w, ProblemNotMigrated, "the receiver's inbox is not set up: its operator must run the migrations (migrate.Up, or \"txinbox migrate up\")")
		return
	}
	if err != nil {
		rc.cfg.Sink.Store.Logger.Error("txinbox/webhook: cannot store the request; answered 503, the sender retries",
			"path", rec.Source, "id", rec.MessageID, "err", err)
		writeProblem(w, ProblemStoreUnavailable, "the message could not be stored; retry")
		return
	}
	switch {
	case res.Conflicts > 0:
		writeProblem(w, ProblemKeyReused, "a message with this key was stored before with another kind or payload; it is kept, and this one dropped")
		return
	case res.Duplicates > 0:
		w.WriteHeader(http.StatusOK)
	default:
		w.WriteHeader(http.StatusAccepted)
	}
	rc.sink.CountAcked(1)
}

// dropped are the request headers not stored: the connection's own, credentials, and the signature.
var dropped = map[string]bool{
	"accept-encoding": true, "authorization": true, "connection": true, "content-length": true,
	"cookie": true, "keep-alive": true, "proxy-authorization": true, "proxy-connection": true,
	"te": true, "trailer": true, "transfer-encoding": true, "upgrade": true, HeaderSignature: true,
}

// record turns a request into a Record (see [Receiver]).
func record(r *http.Request, body []byte) *adapters.Record {
	h := make(map[string]string, len(r.Header))
	for name, vs := range r.Header {
		name = strings.ToLower(name)
		if !dropped[name] && len(vs) > 0 {
			h[name] = strings.Join(vs, ", ")
		}
	}
	return &adapters.Record{Source: r.URL.Path, Offset: -1, MessageID: r.Header.Get(HeaderID), Headers: h,
		CloudEvent: envelope.HTTP.Attributes(h), Body: body, Raw: r}
}

// Problem types (the "type" member of the problem documents a [Receiver] writes). Each URI names the
// constant's own documentation.
const (
	problemBase = "https://pkg.go.dev/github.com/txinbox/txinbox/adapters/webhook#"

	// ProblemRequestInvalid (400): the request body could not be read.
	ProblemRequestInvalid = problemBase + "ProblemRequestInvalid"
	// ProblemUnauthenticated (401): [Verify] refused the request: a webhook-* header missing, a
	// timestamp outside the tolerance, or no matching signature.
	ProblemUnauthenticated = problemBase + "ProblemUnauthenticated"
	// ProblemMethodNotAllowed (405): the request is not a POST.
	ProblemMethodNotAllowed = problemBase + "ProblemMethodNotAllowed"
	// ProblemKeyReused (409): the message's key was stored before with another kind or payload;
	// the stored message is kept and this one dropped.
	ProblemKeyReused = problemBase + "ProblemKeyReused"
	// ProblemRequestTooLarge (413): the body is larger than ReceiverConfig.MaxBodyBytes.
	ProblemRequestTooLarge = problemBase + "ProblemRequestTooLarge"
	// ProblemNotMigrated (500): the receiver's inbox schema has no txinbox tables: its migrations
	// were not run (migrate.Up, or the command "txinbox migrate up"); nothing is stored until they are.
	ProblemNotMigrated = problemBase + "ProblemNotMigrated"
	// ProblemStoreUnavailable (503): the inbox could not store the message (the database is
	// unreachable, or the commit failed); nothing was stored, and the sender retries.
	ProblemStoreUnavailable = problemBase + "ProblemStoreUnavailable"
)

// ContentTypeProblem is the media type of problem documents (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// Problem is an RFC 9457 problem document, as a [Receiver] writes it.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

var problems = map[string]struct {
	status int
	title  string
}{
	ProblemRequestInvalid:   {http.StatusBadRequest, "Request body unreadable"},
	ProblemUnauthenticated:  {http.StatusUnauthorized, "Webhook signature not verified"},
	ProblemMethodNotAllowed: {http.StatusMethodNotAllowed, "Method not allowed"},
	ProblemKeyReused:        {http.StatusConflict, "Key reused with another kind or payload"},
	ProblemRequestTooLarge:  {http.StatusRequestEntityTooLarge, "Request body too large"},
	ProblemNotMigrated:      {http.StatusInternalServerError, "Inbox not set up"},
	ProblemStoreUnavailable: {http.StatusServiceUnavailable, "Inbox unavailable"},
}

// writeProblem writes the problem document of type typ with detail.
func writeProblem(w http.ResponseWriter, typ, detail string) {
	p := problems[typ]
	body, _ := json.Marshal(Problem{Type: typ, Title: p.title, Status: p.status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.status)
	_, _ = w.Write(body)
}
