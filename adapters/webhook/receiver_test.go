package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/webhook"
)

func newReceiver(t *testing.T, cfg webhook.ReceiverConfig) *webhook.Receiver {
	t.Helper()
	r, err := webhook.NewReceiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// post sends a request signed with secret (unless sign is false) under id, with headers and body,
// and returns the answer's status, Content-Type and body.
func post(t *testing.T, url, secret, id string, body []byte, headers map[string]string, sign bool) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range headers {
		req.Header.Set(name, v)
	}
	if sign {
		now := time.Now()
		sig, err := webhook.Sign(secret, id, now, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(webhook.HeaderID, id)
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(webhook.HeaderSignature, sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// sender is a Standard Webhooks sender that POSTs each of its messages, signed, until a request of it
// is answered 2xx: the queue a webhook Receiver acknowledges from, for the conformance suite's sink tests.
type sender struct {
	url, secret string
	// inOrder: a round stops at the first message not answered 2xx, so that none is sent before the
	// ones ahead of it are acknowledged (as an outbox relay sends a key's events).
	inOrder bool

	mu      sync.Mutex
	pending []conformance.Msg
}

// round POSTs every pending message once and drops those answered 2xx.
func (s *sender) round(t *testing.T) {
	s.mu.Lock()
	msgs := append([]conformance.Msg(nil), s.pending...)
	s.mu.Unlock()
	for _, m := range msgs {
		req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(m.Payload))
		if err != nil {
			t.Error(err)
			return
		}
		now := time.Now()
		sig, _ := webhook.Sign(s.secret, m.Key, now, m.Payload)
		req.Header.Set(webhook.HeaderID, m.Key)
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(webhook.HeaderSignature, sig)
		req.Header.Set(adapters.DefaultKindHeader, "credit")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if s.inOrder {
				return
			}
			continue // the receiver stopped
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 && s.inOrder {
			return
		}
		if resp.StatusCode/100 == 2 {
			s.mu.Lock()
			for i, p := range s.pending {
				if p.Key == m.Key {
					s.pending = append(s.pending[:i], s.pending[i+1:]...)
					break
				}
			}
			s.mu.Unlock()
		}
	}
}

// receiving is a Receiver behind a server, with the sender's loop that POSTs to it.
type receiving struct {
	r    *webhook.Receiver
	srv  *httptest.Server
	stop chan struct{}
	done chan struct{}
}

func (c *receiving) Stats() adapters.Stats { return c.r.Stats() }

func (c *receiving) Stop(context.Context) error {
	close(c.stop)
	<-c.done
	c.srv.Close()
	return nil
}

// receiverHarness is the conformance.SinkSetup of a Receiver behind a server, fed by s.
func receiverHarness(t *testing.T, secret string, s *sender) conformance.SinkSetup {
	return conformance.SinkSetup{
		Publish: func(msgs []conformance.Msg) {
			s.mu.Lock()
			s.pending = append(s.pending, msgs...)
			s.mu.Unlock()
		},
		Start: func(sink adapters.SinkConfig, _ int) conformance.Consumer {
			c := &receiving{r: newReceiver(t, webhook.ReceiverConfig{Secret: secret, Sink: sink}), stop: make(chan struct{}), done: make(chan struct{})}
			c.srv = httptest.NewServer(c.r)
			s.url = c.srv.URL
			go func() {
				defer close(c.done)
				for {
					s.round(t)
					select {
					case <-c.stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			return c
		},
		Unacked: func() int {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.pending)
		},
	}
}

// problem decodes an answer's RFC 9457 problem document and fails t unless it is one of type typ and
// status.
func problem(t *testing.T, what string, status int, contentType string, body []byte, typ string, wantStatus int) {
	t.Helper()
	var p webhook.Problem
	if status != wantStatus || contentType != webhook.ContentTypeProblem || json.Unmarshal(body, &p) != nil || p.Type != typ || p.Status != wantStatus || p.Title == "" {
		t.Errorf("%s: answered %d %s %s, want %d with a problem of type %s", what, status, contentType, body, wantStatus, typ)
	}
}

// inboxRow is a stored message of the consumer "hooks".
type inboxRow struct {
	kind, ordering, state, lastError, raw string
	headers                               map[string]string
}

func rowsOf(t *testing.T, db *adaptertest.DB) map[string]inboxRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.SQL(`SELECT key, kind, coalesce(ordering_key, ''), state, coalesce(last_error, ''),
		coalesce(convert_from(raw, 'UTF8'), ''), headers FROM {schema}.inbox WHERE consumer = 'hooks'`))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]inboxRow{}
	for rows.Next() {
		var key string
		var r inboxRow
		if err := rows.Scan(&key, &r.kind, &r.ordering, &r.state, &r.lastError, &r.raw, &r.headers); err != nil {
			t.Fatal(err)
		}
		out[key] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReceiverAnswers: what a Receiver answers and stores for each kind of request. A CloudEvents
// request (ce- headers, percent-encoded) is stored under its ce-id with its ce-type as kind, its
// decoded ce-partitionkey as ordering key, its trace context as traceparent and tracestate and the
// attributes under ce- names, without the connection's headers or the signature, answered 202 after
// the commit; sent again it is a duplicate, 200; the same id with another payload is 409, the stored
// message kept; a body that is not JSON, and a request with no kind, are stored dead and answered
// 202; a bad or missing signature or a stale timestamp is 401, a GET 405, a body over MaxBodyBytes
// 413, and a database that cannot be reached 503, nothing stored; the errors are problem documents.
func TestReceiverAnswers(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	sw := adaptertest.NewSwitchDB(db.Pool)
	secret := webhook.NewSecret()
	rc := newReceiver(t, webhook.ReceiverConfig{Secret: secret, MaxBodyBytes: 256,
		Sink: adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "hooks"}})
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	url := srv.URL + "/hooks/orders"

	ce := map[string]string{
		"ce-specversion": "1.0", "ce-id": "evt-1", "ce-source": "/shop", "ce-type": "order.paid",
		"ce-time": "2026-01-02T03:04:05Z", "ce-partitionkey": "order%207%20%E2%82%AC",
		"traceparent": conformance.TraceParent, "tracestate": conformance.TraceState, "Content-Type": "application/json",
		"X-Tenant": "t1", "Authorization": "Bearer secret",
	}
	body := []byte(`{"order": 7}`)
	if status, _, b := post(t, url, secret, "wh-1", body, ce, true); status != http.StatusAccepted || len(b) != 0 {
		t.Fatalf("CloudEvents request: answered %d %s, want 202", status, b)
	}
	rows := rowsOf(t, db)
	r, ok := rows["evt-1"]
	if !ok || r.state != "pending" || r.kind != "order.paid" || r.ordering != "order 7 €" {
		t.Fatalf("stored %+v (all %v), want evt-1 pending, kind order.paid, ordering key %q", r, rows, "order 7 €")
	}
	for name, want := range map[string]string{
		"ce-specversion": "1.0", "ce-id": "evt-1", "ce-source": "/shop", "ce-type": "order.paid", "ce-time": "2026-01-02T03:04:05Z",
		"ce-partitionkey": "order 7 €", "ce-datacontenttype": "application/json", "traceparent": conformance.TraceParent,
		"tracestate": conformance.TraceState, "x-tenant": "t1", "webhook-id": "wh-1", "content-type": "application/json",
	} {
		if r.headers[name] != want {
			t.Errorf("stored header %s = %q, want %q (headers %v)", name, r.headers[name], want, r.headers)
		}
	}
	for _, name := range []string{"authorization", "webhook-signature", "content-length", "accept-encoding", "Ce-Id"} {
		if _, ok := r.headers[name]; ok {
			t.Errorf("stored header %s: want it dropped (headers %v)", name, r.headers)
		}
	}
	if status, _, _ := post(t, url, secret, "wh-1", body, ce, true); status != http.StatusOK {
		t.Errorf("the same request again: answered %d, want 200 (a duplicate)", status)
	}
	status, ct, b := post(t, url, secret, "wh-1b", []byte(`{"order": 8}`), ce, true)
	problem(t, "same ce-id, another payload", status, ct, b, webhook.ProblemKeyReused, http.StatusConflict)

	if status, _, b := post(t, url, secret, "wh-2", []byte(`not json`), map[string]string{"x-kind": "order.paid"}, true); status != http.StatusAccepted {
		t.Errorf("a body that is not JSON: answered %d %s, want 202 (stored dead)", status, b)
	}
	if status, _, b := post(t, url, secret, "wh-3", []byte(`{"no": "kind"}`), nil, true); status != http.StatusAccepted {
		t.Errorf("no kind: answered %d %s, want 202 (stored dead)", status, b)
	}

	status, ct, b = post(t, url, secret, "wh-4", body, ce, false)
	problem(t, "unsigned", status, ct, b, webhook.ProblemUnauthenticated, http.StatusUnauthorized)
	other := webhook.NewSecret()
	status, ct, b = post(t, url, other, "wh-5", body, map[string]string{"x-kind": "k"}, true)
	problem(t, "signed with another secret", status, ct, b, webhook.ProblemUnauthenticated, http.StatusUnauthorized)
	old := time.Now().Add(-time.Hour)
	sig, _ := webhook.Sign(secret, "wh-6", old, body)
	status, ct, b = post(t, url, secret, "", body, map[string]string{"x-kind": "k", webhook.HeaderID: "wh-6",
		webhook.HeaderTimestamp: strconv.FormatInt(old.Unix(), 10), webhook.HeaderSignature: sig}, false)
	problem(t, "a timestamp an hour old", status, ct, b, webhook.ProblemUnauthenticated, http.StatusUnauthorized)
	status, ct, b = post(t, url, secret, "wh-7", bytes.Repeat([]byte(" "), 257), map[string]string{"x-kind": "k"}, true)
	problem(t, "a body over MaxBodyBytes", status, ct, b, webhook.ProblemRequestTooLarge, http.StatusRequestEntityTooLarge)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	problem(t, "GET", resp.StatusCode, resp.Header.Get("Content-Type"), b, webhook.ProblemMethodNotAllowed, http.StatusMethodNotAllowed)
	if allow := resp.Header.Get("Allow"); allow != http.MethodPost {
		t.Errorf("GET: Allow %q, want POST", allow)
	}

	sw.Set(adaptertest.DeadPool(t))
	status, ct, b = post(t, url, secret, "wh-8", []byte(`{"order": 9}`), map[string]string{"x-kind": "k"}, true)
	problem(t, "the database unreachable", status, ct, b, webhook.ProblemStoreUnavailable, http.StatusServiceUnavailable)
	sw.Set(db.Pool)

	rows = rowsOf(t, db)
	if len(rows) != 3 {
		t.Errorf("the inbox holds %d messages %v, want evt-1 and the two dead ones", len(rows), rows)
	}
	if r := rows["evt-1"]; r.state != "pending" || r.kind != "order.paid" || r.headers["webhook-id"] != "wh-1" {
		t.Errorf("evt-1 changed: %+v", r)
	}
	if r := rows["wh-2"]; r.state != "dead" || r.raw != "not json" {
		t.Errorf("the body that is not JSON: stored %+v, want dead under its webhook-id with its raw bytes", r)
	}
	if r := rows["wh-3"]; r.state != "dead" || !strings.Contains(r.lastError, "no kind") {
		t.Errorf("no kind: stored %+v, want dead, for want of a kind", r)
	}
	if st := rc.Stats(); st.Inserted != 1 || st.Duplicates != 1 || st.Conflicts != 1 || st.Undecodable != 2 || st.Failures != 1 || st.Acked != 4 {
		t.Errorf("stats %+v: want 1 inserted, 1 duplicate, 1 conflict, 2 undecodable, 1 failure, 4 answered 2xx", st)
	}
}

// TestReceiverNotMigrated: a Receiver whose inbox schema has no txinbox tables answers 500
// ProblemNotMigrated, whose detail says to run the migrations, not 503 "retry" forever; and the log
// names txinbox.ErrNotMigrated.
func TestReceiverNotMigrated(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	var logs bytes.Buffer
	secret := webhook.NewSecret()
	rc := newReceiver(t, webhook.ReceiverConfig{Secret: secret, Sink: adapters.SinkConfig{Consumer: "hooks",
		Store: txinbox.Store{DB: db.Pool, Schema: "txinbox_not_migrated", Logger: slog.New(slog.NewTextHandler(&logs, nil))}}})
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	status, ct, b := post(t, srv.URL+"/hooks", secret, "wh-1", []byte(`{"order": 1}`), map[string]string{"x-kind": "k"}, true)
	problem(t, "an unmigrated schema", status, ct, b, webhook.ProblemNotMigrated, http.StatusInternalServerError)
	if !strings.Contains(string(b), "migrate") {
		t.Errorf("the problem's detail %s does not say to run the migrations", b)
	}
	if !strings.Contains(logs.String(), "the schema has no txinbox tables (run migrate.Up") { // txinbox.ErrNotMigrated, quoted by the log
		t.Errorf("the log %q does not name txinbox.ErrNotMigrated", logs.String())
	}
}

// TestNewReceiverChecksConfig: NewReceiver refuses a missing or malformed secret, a missing store or
// consumer, and a negative Tolerance, WriteTimeout or MaxBodyBytes, each with a *txinbox.ConfigError
// naming the field.
func TestNewReceiverChecksConfig(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	good := webhook.ReceiverConfig{Secret: webhook.NewSecret(), Sink: adapters.SinkConfig{Store: db.Store(), Consumer: "hooks"}}
	if _, err := webhook.NewReceiver(good); err != nil {
		t.Fatal(err)
	}
	for field, mod := range map[string]func(*webhook.ReceiverConfig){
		"Secret":       func(c *webhook.ReceiverConfig) { c.Secret = "whsec_!!" },
		"Tolerance":    func(c *webhook.ReceiverConfig) { c.Tolerance = -1 },
		"WriteTimeout": func(c *webhook.ReceiverConfig) { c.WriteTimeout = -1 },
		"MaxBodyBytes": func(c *webhook.ReceiverConfig) { c.MaxBodyBytes = -1 },
		"Consumer":     func(c *webhook.ReceiverConfig) { c.Sink.Consumer = "" },
	} {
		c := good
		mod(&c)
		var ce *txinbox.ConfigError
		if _, err := webhook.NewReceiver(c); !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: NewReceiver returned %v, want a ConfigError on %s", field, err, field)
		}
	}
}
