// Package webhook publishes the events of a txinbox outbox (package outbox) as HTTP webhooks
// following the Standard Webhooks specification (https://www.standardwebhooks.com), each a
// CloudEvent in the binary content mode of the CloudEvents HTTP binding, and receives them into a
// txinbox inbox.
//
// A [Publisher] POSTs each event's payload, byte for byte, as the body of a request to the endpoint
// of its topic, with the headers
//
//	webhook-id:        the event id (outbox.Event.ID), the same on every attempt: receivers deduplicate by it
//	webhook-timestamp: the attempt's time, in Unix seconds
//	webhook-signature: "v1," + base64(HMAC-SHA256(secret, id + "." + timestamp + "." + body))
//	ce-specversion:    1.0
//	ce-id:             the event id
//	ce-source:         outbox.Event.Source (the relay's RelayConfig.Source)
//	ce-type:           outbox.Event.Kind
//	ce-time:           outbox.Event.CreatedAt, RFC 3339 in UTC
//	ce-partitionkey:   outbox.Event.Key, when not "" (the Partitioning extension)
//	ce-traceparent:    the event's traceparent and tracestate headers (the Distributed Tracing
//	ce-tracestate:     extension), when it has them: the trace context of the relay's hand-over
//	Content-Type:      outbox.Event.ContentType (the datacontenttype attribute)
//
// and the event's own headers (the trace context's traceparent and tracestate among them),
// unchanged. The values of the ce- headers are percent-encoded as the HTTP binding says. An event is
// acknowledged when its endpoint answers 2xx. A receiver checks a request with [Verify] and
// deduplicates by webhook-id (or ce-id, the same).
//
// A [Receiver] is such a receiver: an http.Handler that verifies each request and stores it into an
// inbox through an adapters.Sink, reading key, kind, ordering key and trace context from the
// envelope, and answers 2xx only after the commit.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/adapters/internal/hdr"
	"github.com/txinbox/txinbox/outbox"
)

// Defaults of Config (documented on its fields).
const (
	defaultTimeout     = 10 * time.Second
	defaultConcurrency = 8
	defaultUserAgent   = "txinbox-webhook"
)

// ErrNoEndpoint is the (permanent) error of an event whose topic has no endpoint: not in
// Config.Endpoints, and Config.URL empty.
var ErrNoEndpoint = errors.New("txinbox/webhook: no endpoint for the topic")

// Config configures a Publisher. Secret, and URL or Endpoints, are required; every other zero field
// takes the documented default. [New] returns a *txinbox.ConfigError naming the field that is
// missing or wrong.
type Config struct {
	// Endpoints maps a topic to the URL its events are POSTed to.
	Endpoints map[string]string
	// URL receives the events of every topic not in Endpoints. Empty: such an event fails with
	// [ErrNoEndpoint], permanently (it is dead at once).
	URL string
	// Secret signs every request: "whsec_" followed by the standard base64 of MinSecretBytes to
	// MaxSecretBytes random bytes ([NewSecret] makes one). The receivers verify with the same secret.
	Secret string
	// Client sends the requests. Default: an http.Client that follows no redirect (a 3xx answer is a
	// failure). A Client of the caller's should not follow redirects either: a 301 or 302 would turn
	// the POST into a GET.
	Client *http.Client
	// Timeout bounds each request, from sending it to reading its answer's body; a request that
	// outlives it is a failure, retried. Default: 10s. It should be less than the
	// relay's Timeout, which bounds the whole Publish call.
	Timeout time.Duration
	// Concurrency is the most requests in flight at once for one Publish call (the events of a call
	// have distinct keys, so they need no order among them). Default: 8.
	Concurrency int
	// UserAgent is the requests' User-Agent header. Default: "txinbox-webhook".
	UserAgent string
}

// Publisher sends outbox events as webhooks; it implements outbox.Publisher. Make it with [New]. It is
// safe for concurrent use.
type Publisher struct {
	cfg Config
	key []byte
}

// New checks cfg and returns a Publisher. It sends nothing.
func New(cfg Config) (*Publisher, error) {
	if cfg.URL == "" && len(cfg.Endpoints) == 0 {
		return nil, &txinbox.ConfigError{Field: "URL", Reason: "required (or Endpoints)"}
	}
	if cfg.URL != "" {
		if err := checkURL(cfg.URL); err != nil {
			return nil, &txinbox.ConfigError{Field: "URL", Reason: err.Error()}
		}
	}
	for topic, u := range cfg.Endpoints {
		if err := checkURL(u); err != nil {
			return nil, &txinbox.ConfigError{Field: "Endpoints", Reason: fmt.Sprintf("topic %q: %v", topic, err)}
		}
	}
	key, err := decodeSecret(cfg.Secret)
	if err != nil || len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, &txinbox.ConfigError{Field: "Secret",
			Reason: fmt.Sprintf("want %q followed by the standard base64 of %d to %d bytes", SecretPrefix, MinSecretBytes, MaxSecretBytes)}
	}
	switch {
	case cfg.Timeout < 0:
		return nil, &txinbox.ConfigError{Field: "Timeout", Reason: "must not be negative"}
	case cfg.Timeout == 0:
		cfg.Timeout = defaultTimeout
	}
	switch {
	case cfg.Concurrency < 0:
		return nil, &txinbox.ConfigError{Field: "Concurrency", Reason: "must not be negative"}
	case cfg.Concurrency == 0:
		cfg.Concurrency = defaultConcurrency
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = defaultUserAgent
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Publisher{cfg: cfg, key: key}, nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http or https URL", s)
	}
	return nil
}

// StatusError is the error of an event whose endpoint answered a status other than 2xx. It is
// wrapped with txinbox.Permanent for a 4xx other than 408 and 429.
type StatusError struct {
	URL    string
	Status int
	// Body is the start of the answer's body (at most 256 bytes), for the logs.
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("txinbox/webhook: %s answered %d %s: %q", e.URL, e.Status, http.StatusText(e.Status), e.Body)
}

// Publish POSTs each event to its endpoint, up to Config.Concurrency at once, and returns once each
// was answered or failed (nil if every one was answered 2xx, else an *outbox.BatchError with the
// error of each event). The outcome of an event:
//
//   - 2xx: acknowledged (sent);
//   - 408, 429, 5xx, any answer outside 2xx and 4xx (1xx; 3xx: redirects are not followed), a
//     request that outlives Config.Timeout, and a network error: a failure, which the relay retries after
//     its backoff, under the same webhook-id (a Retry-After header is not read: the relay's Backoff
//     sets the delay);
//   - any other 4xx: a *StatusError wrapped with txinbox.Permanent: the endpoint refuses the event
//     itself, and the event is dead at once;
//   - a topic without an endpoint ([ErrNoEndpoint]) or an event header that HTTP cannot carry (a
//     name that is not an HTTP token): permanent too.
//
// Every attempt is signed anew, with its own webhook-timestamp. The event's headers are sent as
// they are, except that the publisher's own (the envelope's ce- headers, Content-Type, User-Agent and
// the webhook-* headers) replace an event header of the same name, and that Go's HTTP client writes Host, Content-Length
// and Transfer-Encoding itself. When ctx ends, requests in flight are cancelled and their events fail
// with ctx's error.
func (p *Publisher) Publish(ctx context.Context, events []outbox.Event) error {
	errs := make([]error, len(events))
	sem := make(chan struct{}, p.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range events {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			for j := i; j < len(events); j++ {
				errs[j] = ctx.Err()
			}
			wg.Wait()
			return outbox.Errors(errs)
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = p.send(ctx, &events[i])
		})
	}
	wg.Wait()
	return outbox.Errors(errs)
}

var _ outbox.TopicChecker = (*Publisher)(nil)

// CheckTopic implements outbox.TopicChecker: it returns an error matching [ErrNoEndpoint] for a
// topic without an endpoint (not in Config.Endpoints, and Config.URL empty), so that the relay makes
// its events dead before any request, and a Client whose Config.TopicChecker is p refuses them.
func (p *Publisher) CheckTopic(topic string) error {
	_, err := p.endpoint(topic)
	return err
}

// endpoint returns the URL the events of topic are POSTed to.
func (p *Publisher) endpoint(topic string) (string, error) {
	endpoint, ok := p.cfg.Endpoints[topic]
	if !ok {
		endpoint = p.cfg.URL
	}
	if endpoint == "" {
		return "", fmt.Errorf("%w %q", ErrNoEndpoint, topic)
	}
	return endpoint, nil
}

// send makes one attempt of ev.
func (p *Publisher) send(ctx context.Context, ev *outbox.Event) error {
	endpoint, err := p.endpoint(ev.Topic)
	if err != nil {
		return txinbox.Permanent(err)
	}
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, endpoint, bytes.NewReader(ev.Payload))
	if err != nil {
		return txinbox.Permanent(err)
	}
	for name := range ev.Headers {
		if !hdr.Token(name) {
			return txinbox.Permanent(fmt.Errorf("txinbox/webhook: header name %q is not an HTTP token", name))
		}
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	hs := envelope.HTTP.Headers(ev,
		envelope.Header{Name: "User-Agent", Value: p.cfg.UserAgent},
		envelope.Header{Name: HeaderID, Value: ev.ID},
		envelope.Header{Name: HeaderTimestamp, Value: ts},
		envelope.Header{Name: HeaderSignature, Value: "v1," + sign(p.key, ev.ID, ts, ev.Payload)})
	for _, h := range hs {
		req.Header[http.CanonicalHeaderKey(h.Name)] = []string{h.Value}
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rctx.Err() != nil {
			return fmt.Errorf("txinbox/webhook: %s: no answer within %v: %w", endpoint, p.cfg.Timeout, err)
		}
		return err
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	// The status decides; the rest of the body is read (up to 64 KiB) so that the connection can be
	// reused, and an error reading it changes nothing.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return classify(&StatusError{URL: endpoint, Status: resp.StatusCode, Body: strings.ToValidUTF8(string(head), "?")})
}

// classify returns the error of an answer: nil for 2xx, Permanent for a 4xx other than 408 and 429,
// else the error as it is (retried).
func classify(e *StatusError) error {
	switch {
	case e.Status >= 200 && e.Status < 300:
		return nil
	case e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests:
		return e
	case e.Status >= 400 && e.Status < 500:
		return txinbox.Permanent(e)
	default:
		return e
	}
}
