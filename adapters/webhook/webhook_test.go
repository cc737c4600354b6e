package webhook_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/cetest"
	"github.com/txinbox/txinbox/adapters/internal/pubtest"
	"github.com/txinbox/txinbox/adapters/webhook"
	"github.com/txinbox/txinbox/outbox"
)

// The test vector published with the Standard Webhooks reference implementations.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// request is one request an endpoint received, with what Verify said of it.
type request struct {
	path   string
	header http.Header
	body   []byte
	verify error
}

// endpoint is an httptest.Server that keeps every request and answers with the status answer
// returns for the n-th request (from 1) of its path's event; 200 if answer is nil.
type endpoint struct {
	t      *testing.T
	srv    *httptest.Server
	secret string
	answer func(n int, r *http.Request) int

	mu   sync.Mutex
	reqs []request
	ok   []request // the requests answered 2xx
}

func newEndpoint(t *testing.T, secret string, answer func(n int, r *http.Request) int) *endpoint {
	t.Helper()
	e := &endpoint{t: t, secret: secret, answer: answer}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	req := request{path: r.URL.Path, header: r.Header.Clone(), body: body, verify: webhook.Verify(e.secret, r.Header, body, time.Minute)}
	e.mu.Lock()
	e.reqs = append(e.reqs, req)
	n := 0
	for _, q := range e.reqs {
		if q.header.Get(webhook.HeaderID) == r.Header.Get(webhook.HeaderID) {
			n++
		}
	}
	e.mu.Unlock()
	status := http.StatusOK
	if e.answer != nil {
		status = e.answer(n, r)
	}
	if req.verify != nil {
		status = http.StatusUnauthorized
	}
	if status/100 == 2 {
		e.mu.Lock()
		e.ok = append(e.ok, req)
		e.mu.Unlock()
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, http.StatusText(status))
}

// requests returns the requests received so far.
func (e *endpoint) requests() []request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]request(nil), e.reqs...)
}

// received returns the requests answered 2xx, as pubtest sees messages.
func (e *endpoint) received() []conformance.Received {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]conformance.Received, len(e.ok))
	for i, r := range e.ok {
		h := map[string]string{}
		for name := range r.header {
			h[strings.ToLower(name)] = r.header.Get(name)
		}
		// A CloudEvents receiver of the SDK (its HTTP binding) reads the request.
		ce, err := cetest.HTTP(r.header, r.body)
		out[i] = conformance.Received{ID: r.header.Get(webhook.HeaderID), Payload: r.body, Headers: h, CloudEvent: ce, CloudEventErr: err}
	}
	return out
}

func newPublisher(t *testing.T, cfg webhook.Config) *webhook.Publisher {
	t.Helper()
	p, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSignatureMatchesTheSpecificationVector: Sign reproduces the signature of the specification's
// test vector exactly (HMAC-SHA256 of id.timestamp.body, base64, "v1," prefix, the secret's bytes
// decoded from base64), with or without the whsec_ prefix, and Verify accepts it among other
// signatures at that time.
func TestSignatureMatchesTheSpecificationVector(t *testing.T) {
	t.Parallel()
	at := time.Unix(vectorTimestamp, 0)
	for _, secret := range []string{vectorSecret, strings.TrimPrefix(vectorSecret, webhook.SecretPrefix)} {
		got, err := webhook.Sign(secret, vectorID, at, []byte(vectorBody))
		if err != nil || got != vectorSignature {
			t.Fatalf("Sign(%q) = %q, %v; want %q", secret, got, err, vectorSignature)
		}
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, vectorID)
	h.Set(webhook.HeaderTimestamp, strconv.Itoa(vectorTimestamp))
	h.Set(webhook.HeaderSignature, "v1,bm9wZQ== v2,"+vectorSignature[3:]+" "+vectorSignature)
	if err := webhook.VerifyAt(vectorSecret, h, []byte(vectorBody), time.Minute, at.Add(30*time.Second)); err != nil {
		t.Fatalf("Verify of the specification's vector: %v", err)
	}
}

// TestVerifyRejectsWhatWasNotSigned: Verify refuses a request whose body, id or timestamp differs
// from what was signed, one signed with another secret, one too old or too far ahead, one with a
// header missing, and a bad secret, each with its error.
func TestVerifyRejectsWhatWasNotSigned(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	now := time.Now()
	body := []byte(`{"amount": 42}`)
	signed := func(id string, at time.Time, body []byte, secret string) http.Header {
		sig, err := webhook.Sign(secret, id, at, body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
		h.Set(webhook.HeaderSignature, sig)
		return h
	}
	if err := webhook.Verify(secret, signed("evt-1", now, body, secret), body, 0); err != nil {
		t.Fatalf("authentic request refused: %v", err)
	}
	otherID := signed("evt-1", now, body, secret)
	otherID.Set(webhook.HeaderID, "evt-2")
	otherTS := signed("evt-1", now, body, secret)
	otherTS.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
	noSig := signed("evt-1", now, body, secret)
	noSig.Del(webhook.HeaderSignature)
	for _, c := range []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		want   error
	}{
		{"body changed", secret, signed("evt-1", now, body, secret), []byte(`{"amount": 43}`), webhook.ErrSignature},
		{"id changed", secret, otherID, body, webhook.ErrSignature},
		{"timestamp changed", secret, otherTS, body, webhook.ErrSignature},
		{"another secret", secret, signed("evt-1", now, body, webhook.NewSecret()), body, webhook.ErrSignature},
		{"too old", secret, signed("evt-1", now.Add(-6*time.Minute), body, secret), body, webhook.ErrTimestamp},
		{"too far ahead", secret, signed("evt-1", now.Add(6*time.Minute), body, secret), body, webhook.ErrTimestamp},
		{"no signature", secret, noSig, body, webhook.ErrMissingHeader},
		{"bad secret", "whsec_not base64!", signed("evt-1", now, body, secret), body, webhook.ErrSecret},
	} {
		if err := webhook.Verify(c.secret, c.h, c.body, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.want)
		}
	}
}

// holdingEndpoint is an endpoint that answers 200; once told to hold, it answers the next three
// requests and leaves every later one waiting until released (then answers it 200) or abandoned by
// the publisher (answers 503).
type holdingEndpoint struct {
	*endpoint

	mu      sync.Mutex
	budget  int // answers left before holding; -1: not holding
	waiting int // requests held now
	release chan struct{}
}

func newHoldingEndpoint(t *testing.T, secret string) *holdingEndpoint {
	t.Helper()
	h := &holdingEndpoint{budget: -1, release: make(chan struct{})}
	h.endpoint = newEndpoint(t, secret, func(_ int, r *http.Request) int {
		h.mu.Lock()
		if h.budget != 0 {
			if h.budget > 0 {
				h.budget--
			}
			h.mu.Unlock()
			return http.StatusOK
		}
		h.waiting++
		release := h.release
		h.mu.Unlock()
		defer func() { h.mu.Lock(); h.waiting--; h.mu.Unlock() }()
		select {
		case <-release:
			return http.StatusOK
		case <-r.Context().Done():
			return http.StatusServiceUnavailable
		}
	})
	return h
}

func (h *holdingEndpoint) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.budget = 3
	h.release = make(chan struct{})
}

func (h *holdingEndpoint) holding() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting > 0
}

func (h *holdingEndpoint) unhold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.budget = -1
	close(h.release)
}

// publishOne publishes one event of topic in a committed transaction and runs a relay with pub; it
// returns the event's id and the relay's attempts.
func publishOne(t *testing.T, env *pubtest.Env, pub outbox.Publisher, topic string) (string, *pubtest.Results) {
	t.Helper()
	ids := env.Publish(t, true, outbox.Message{Topic: topic, Key: "k", Payload: []byte(`{"n": 1}`),
		Headers: map[string]string{"traceparent": conformance.TraceParent}})
	return ids[0], env.Relay(t, pub, nil)
}

// TestServerErrorThenSuccessSameIDValidSignatures: an endpoint that answers 500 and then 200 gets the
// event twice, under the same webhook-id, each request signed anew (its own timestamp) and verified;
// the event is sent after one failed attempt.
func TestServerErrorThenSuccessSameIDValidSignatures(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	ep := newEndpoint(t, secret, func(n int, _ *http.Request) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	env := pubtest.New(t)
	id, _ := publishOne(t, env, newPublisher(t, webhook.Config{URL: ep.srv.URL, Secret: secret}), "invoice.paid")
	env.WaitSent(t, []string{id})
	reqs := ep.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2 (500, then 200)", len(reqs))
	}
	for i, r := range reqs {
		if got := r.header.Get(webhook.HeaderID); got != id {
			t.Errorf("request %d: webhook-id %q, want the event id %q", i+1, got, id)
		}
		if r.verify != nil {
			t.Errorf("request %d: Verify = %v", i+1, r.verify)
		}
	}
	if row := env.Row(t, id); row.AttemptsFailed != 1 || !strings.Contains(row.LastError, "500") {
		t.Errorf("outbox row %+v, want one failed attempt (the 500)", row)
	}
}

// TestGoneIsDeadAtOnce: a 410 Gone makes the event dead after its one attempt (a permanent refusal),
// with no second request.
func TestGoneIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	ep := newEndpoint(t, secret, func(int, *http.Request) int { return http.StatusGone })
	env := pubtest.New(t)
	id, res := publishOne(t, env, newPublisher(t, webhook.Config{URL: ep.srv.URL, Secret: secret}), "user.deleted")
	adaptertest.WaitFor(t, "the event's attempt to be recorded", func() bool { return len(res.Of(id)) > 0 })
	row := env.Row(t, id)
	if row.State != "dead" || row.AttemptsFailed != 1 {
		t.Fatalf("after a 410 the event is %s with %d failed attempts, want dead after 1 (last error %q)", row.State, row.AttemptsFailed, row.LastError)
	}
	if r := res.Of(id)[0]; r.Outcome != txinbox.OutcomeDead || !txinbox.IsPermanent(r.Err) {
		t.Errorf("attempt outcome %s, error %v; want dead, permanent", r.Outcome, r.Err)
	}
	if n := len(ep.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestTooManyRequestsAndTimeoutAreRetried: a 429, then a request that outlives Config.Timeout (the
// endpoint answers too late), are failures the relay retries; the third attempt, answered 200, sends
// the event.
func TestTooManyRequestsAndTimeoutAreRetried(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ep := newEndpoint(t, secret, func(n int, r *http.Request) int {
		switch n {
		case 1:
			return http.StatusTooManyRequests
		case 2:
			select { // answers only after the publisher gave up on the request
			case <-r.Context().Done():
			case <-release:
			}
			return http.StatusOK
		}
		return http.StatusOK
	})
	env := pubtest.New(t)
	pub := newPublisher(t, webhook.Config{URL: ep.srv.URL, Secret: secret, Timeout: 200 * time.Millisecond})
	id, res := publishOne(t, env, pub, "invoice.paid")
	env.WaitSent(t, []string{id})
	adaptertest.WaitFor(t, "the Tracer to be told of the sent attempt", func() bool { return len(res.Of(id)) >= 3 })
	got := res.Of(id)
	if len(got) != 3 || got[0].Outcome != txinbox.OutcomeRetry || got[1].Outcome != txinbox.OutcomeRetry || got[2].Outcome != txinbox.OutcomeSent {
		t.Fatalf("attempts %+v, want retry (429), retry (timeout), sent", got)
	}
	if !strings.Contains(got[0].Err.Error(), "429") || !strings.Contains(got[1].Err.Error(), "no answer within") {
		t.Errorf("errors %v and %v, want a 429 and a timeout", got[0].Err, got[1].Err)
	}
}

// TestStatusClasses: 2xx acknowledges; 408, 429, 5xx and 3xx (not followed) are retried failures;
// every other 4xx is permanent.
func TestStatusClasses(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	ep := newEndpoint(t, secret, func(_ int, r *http.Request) int {
		s, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		return s
	})
	endpoints := map[string]string{}
	codes := []int{200, 201, 204, 302, 400, 401, 403, 404, 408, 409, 410, 413, 422, 429, 500, 502, 503, 504}
	events := make([]outbox.Event, len(codes))
	for i, c := range codes {
		topic := "status-" + strconv.Itoa(c)
		endpoints[topic] = ep.srv.URL + "/" + strconv.Itoa(c)
		events[i] = outbox.Event{ID: "evt-" + strconv.Itoa(c), Topic: topic, Payload: []byte(`{}`)}
	}
	pub := newPublisher(t, webhook.Config{Endpoints: endpoints, Secret: secret})
	err := pub.Publish(context.Background(), events)
	var be *outbox.BatchError
	if !errors.As(err, &be) || len(be.Errs) != len(events) {
		t.Fatalf("Publish = %v, want a BatchError of %d", err, len(events))
	}
	for i, c := range codes {
		e := be.Errs[i]
		switch {
		case c/100 == 2:
			if e != nil {
				t.Errorf("%d: %v, want acknowledged", c, e)
			}
		case c == 408 || c == 429 || c/100 == 5 || c/100 == 3:
			if e == nil || txinbox.IsPermanent(e) {
				t.Errorf("%d: %v, want a failure to retry", c, e)
			}
		default:
			var se *webhook.StatusError
			if !txinbox.IsPermanent(e) || !errors.As(e, &se) || se.Status != c {
				t.Errorf("%d: %v, want a permanent *StatusError", c, e)
			}
		}
	}
}

// TestEndpointsHeadersAndConcurrency: events go to their topic's endpoint, else to URL; with neither,
// an event is dead at once (ErrNoEndpoint); an event header that HTTP cannot carry is permanent; the
// publisher's own headers win over the event's; the events of one call go up to Concurrency at once.
func TestEndpointsHeadersAndConcurrency(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	const conc = 3
	var mu sync.Mutex
	inFlight, most, started := 0, 0, 0
	gate := make(chan struct{})
	var once sync.Once
	ep := newEndpoint(t, secret, func(int, *http.Request) int {
		mu.Lock()
		inFlight++
		started++
		most = max(most, inFlight)
		if inFlight == conc {
			once.Do(func() { close(gate) }) // conc requests at once: let them all answer
		}
		mu.Unlock()
		select {
		case <-gate:
		case <-time.After(5 * time.Second): // fewer than conc at once: answer anyway, and the check below fails
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return http.StatusOK
	})
	pub := newPublisher(t, webhook.Config{URL: ep.srv.URL + "/default", Endpoints: map[string]string{"a": ep.srv.URL + "/a"},
		Secret: secret, Concurrency: conc, Timeout: time.Minute})
	var events []outbox.Event
	for i, topic := range []string{"a", "b", "a", "c", "b"} {
		events = append(events, outbox.Event{ID: "evt-" + strconv.Itoa(i), Topic: topic, Payload: []byte(`{}`),
			Headers: map[string]string{"webhook-id": "forged", "Content-Type": "text/plain", "X-Trace": "t"}})
	}
	if err := pub.Publish(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != conc {
		t.Errorf("at most %d requests in flight, want %d", most, conc)
	}
	paths := map[string]string{}
	for _, r := range ep.requests() {
		paths[r.header.Get(webhook.HeaderID)] = r.path
		if r.verify != nil || r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Trace") != "t" {
			t.Errorf("request %s: verify %v, headers %v", r.header.Get(webhook.HeaderID), r.verify, r.header)
		}
	}
	for i, want := range []string{"/a", "/default", "/a", "/default", "/default"} {
		if got := paths["evt-"+strconv.Itoa(i)]; got != want {
			t.Errorf("event %d (topic %s) went to %q, want %q", i, events[i].Topic, got, want)
		}
	}

	only := newPublisher(t, webhook.Config{Endpoints: map[string]string{"a": ep.srv.URL + "/a"}, Secret: secret})
	err := only.Publish(context.Background(), []outbox.Event{{ID: "evt-x", Topic: "b", Payload: []byte(`{}`)}})
	if !txinbox.IsPermanent(err) || !errors.Is(err, webhook.ErrNoEndpoint) {
		t.Errorf("topic without endpoint: %v, want permanent ErrNoEndpoint", err)
	}
	err = only.Publish(context.Background(), []outbox.Event{{ID: "evt-y", Topic: "a", Payload: []byte(`{}`), Headers: map[string]string{"bad name": "v"}}})
	if !txinbox.IsPermanent(err) {
		t.Errorf("header name with a space: %v, want permanent", err)
	}
}

// TestNewChecksConfig: New refuses a missing or malformed secret, endpoint or URL, and negative
// Timeout or Concurrency, each with a *txinbox.ConfigError naming the field.
func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	ok := webhook.Config{URL: "https://example.com/hook", Secret: webhook.NewSecret()}
	adaptertest.NegativeFields(t, ok, func(cfg webhook.Config) error { _, err := webhook.New(cfg); return err }, "Timeout", "Concurrency")
	short := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 16))
	for field, cfg := range map[string]webhook.Config{
		"URL":       {Secret: ok.Secret},
		"Secret":    {URL: ok.URL, Secret: short},
		"Endpoints": {Endpoints: map[string]string{"a": "/relative"}, Secret: ok.Secret},
	} {
		_, err := webhook.New(cfg)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("New(%+v) = %v, want a ConfigError naming %s", cfg, err, field)
		}
	}
	if _, err := webhook.New(webhook.Config{URL: "ftp://example.com", Secret: ok.Secret}); err == nil {
		t.Error("an ftp URL was accepted")
	}
}

// TestTopicWithoutEndpointIsRefusedBeforeAnyRequest: the Publisher is an outbox.TopicChecker that
// refuses a topic without an endpoint (ErrNoEndpoint), so the relay makes such an event dead at its
// first attempt without a request (outbox.ErrTopicRefused), and a Client given it as
// Config.TopicChecker refuses it before writing. With Config.URL every topic has an endpoint.
func TestTopicWithoutEndpointIsRefusedBeforeAnyRequest(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	ep := newEndpoint(t, secret, func(int, *http.Request) int { return http.StatusOK })
	pub := newPublisher(t, webhook.Config{Endpoints: map[string]string{"invoice.paid": ep.srv.URL}, Secret: secret})
	if err := pub.CheckTopic("invoice.paid"); err != nil {
		t.Errorf("CheckTopic of a topic with an endpoint: %v", err)
	}
	if err := pub.CheckTopic("invoice.payed"); !errors.Is(err, webhook.ErrNoEndpoint) {
		t.Errorf("CheckTopic of a topic without an endpoint: %v, want ErrNoEndpoint", err)
	}
	if err := newPublisher(t, webhook.Config{URL: ep.srv.URL, Secret: secret}).CheckTopic("anything"); err != nil {
		t.Errorf("CheckTopic with a URL for every topic: %v", err)
	}
	env := pubtest.New(t)
	id, res := publishOne(t, env, pub, "invoice.payed")
	adaptertest.WaitFor(t, "the event's attempt to be recorded", func() bool { return len(res.Of(id)) > 0 })
	if row := env.Row(t, id); row.State != "dead" || row.AttemptsFailed != 1 || !strings.Contains(row.LastError, `"invoice.payed"`) {
		t.Fatalf("event of a topic without an endpoint: %s after %d failed attempts (%q), want dead after 1 naming the topic", row.State, row.AttemptsFailed, row.LastError)
	}
	if r := res.Of(id)[0]; !errors.Is(r.Err, outbox.ErrTopicRefused) || !errors.Is(r.Err, webhook.ErrNoEndpoint) {
		t.Errorf("attempt error %v; want outbox.ErrTopicRefused wrapping ErrNoEndpoint", r.Err)
	}
	if n := len(ep.requests()); n != 0 {
		t.Errorf("%d requests for a refused topic, want none", n)
	}
}
