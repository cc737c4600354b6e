package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/webhook"
	"github.com/txinbox/txinbox/outbox"
)

// TestConformance runs the adapters' conformance suite against webhooks (conformance.Run): the
// Publisher POSTs to an endpoint of the test's, and the Receiver is the sink:
//
//   - Deliver: each committed event is POSTed with its id as webhook-id, its payload as the body, its
//     content type as Content-Type, its headers (trace context included) and its CloudEvents envelope
//     as ce- headers, which the SDK's HTTP binding reads into a valid event; a key's events in commit
//     order; nothing of a rolled-back transaction. Every request's signature verifies, and an
//     independent HMAC of id.timestamp.body matches it.
//   - Acknowledgment: while the endpoint answers 503, every attempt fails and is retried and no event
//     is recorded sent; once it answers 200, each is sent and arrives.
//   - ContextEnd: an endpoint that leaves the requests after the first three waiting: when the call's
//     ctx ends, the requests in flight are abandoned and their events, and those not yet sent (the
//     Concurrency of 8 is reached), fail with ctx's error; through a relay none of them is recorded
//     sent.
//   - Pair: a webhook Publisher and a Receiver behind its endpoint, whose Sink names only the store and
//     the consumer, store each event under its id, with its kind, its key as ordering key and its trace
//     context, read from the CloudEvents HTTP binding's headers; a Standard Webhooks request of another
//     sender (webhook-id, x-kind) is stored as such.
//   - CommitFailure: while every commit of the inbox transaction fails, the Receiver answers 503 and
//     acknowledges (answers 2xx) nothing, and the sender keeps every message; once commits succeed,
//     each is stored exactly once.
//   - StoreFailureKeepsOrder: while the database refuses every connection, the Receiver answers 503
//     and acknowledges nothing; a sender that sends in order (as the outbox relay sends a key's events)
//     then has each message stored once, in the order it was sent.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Broker{
		Deliver: func(t *testing.T) conformance.DeliverSetup {
			secret := webhook.NewSecret()
			ep := newEndpoint(t, secret, nil)
			pub := newPublisher(t, webhook.Config{Endpoints: map[string]string{"orders": ep.srv.URL + "/orders"}, Secret: secret})
			t.Cleanup(func() { checkSignatures(t, secret, ep) }) // after the test, before the endpoint closes
			return conformance.DeliverSetup{Publisher: pub, Topic: "orders", Received: ep.received,
				Check: func(t testing.TB, r conformance.Received, ev outbox.Event) {
					if ct := r.Headers["content-type"]; ct != ev.ContentType {
						t.Errorf("event %s: Content-Type %q, want %q", r.ID, ct, ev.ContentType)
					}
				}}
		},
		Acknowledgment: func(t *testing.T) conformance.AckSetup {
			secret := webhook.NewSecret()
			var mu sync.Mutex
			refuse := false
			ep := newEndpoint(t, secret, func(int, *http.Request) int {
				mu.Lock()
				defer mu.Unlock()
				if refuse {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			set := func(v bool) func() {
				return func() { mu.Lock(); refuse = v; mu.Unlock() }
			}
			pub := newPublisher(t, webhook.Config{URL: ep.srv.URL, Secret: secret})
			return conformance.AckSetup{Publisher: pub, Topic: "payments", Refuse: set(true), Accept: set(false), Received: ep.received}
		},
		ContextEnd: func(t *testing.T) conformance.ContextEndSetup {
			secret := webhook.NewSecret()
			ep := newHoldingEndpoint(t, secret)
			pub := newPublisher(t, webhook.Config{URL: ep.srv.URL, Secret: secret, Timeout: time.Minute})
			return conformance.ContextEndSetup{Publisher: pub, Topic: "refunds",
				Hold: ep.hold, Holding: ep.holding, Release: ep.unhold, Received: ep.received}
		},
		Pair: func(t *testing.T) conformance.PairSetup {
			secret := webhook.NewSecret()
			var handler atomic.Pointer[webhook.Receiver]
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if h := handler.Load(); h != nil {
					h.ServeHTTP(w, r)
					return
				}
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			t.Cleanup(srv.Close)
			pub := newPublisher(t, webhook.Config{URL: srv.URL + "/events", Secret: secret})
			return conformance.PairSetup{Publisher: pub, Topic: "orders",
				Start: func(sink adapters.SinkConfig) {
					handler.Store(newReceiver(t, webhook.ReceiverConfig{Secret: secret, Sink: sink}))
				},
				Plain: func(id, kind string, body []byte, headers map[string]string) {
					h := map[string]string{adapters.DefaultKindHeader: kind}
					for name, v := range headers {
						h[name] = v
					}
					if status, _, b := post(t, srv.URL+"/plain", secret, id, body, h, true); status != http.StatusAccepted {
						t.Fatalf("plain request answered %d %s", status, b)
					}
				},
				Foreign: func(brokerID string, attrs map[string]string, body []byte) {
					h := map[string]string{"Content-Type": "application/json"}
					for name, v := range attrs {
						h["ce-"+name] = v
					}
					if status, _, b := post(t, srv.URL+"/foreign", secret, brokerID, body, h, true); status != http.StatusAccepted {
						t.Fatalf("foreign request answered %d %s", status, b)
					}
				}}
		},
		CommitFailure: func(t *testing.T) conformance.SinkSetup {
			secret := webhook.NewSecret()
			return receiverHarness(t, secret, &sender{secret: secret})
		},
		StoreFailureKeepsOrder: func(t *testing.T) conformance.SinkSetup {
			secret := webhook.NewSecret()
			return receiverHarness(t, secret, &sender{secret: secret, inOrder: true})
		},
	})
}

// checkSignatures fails t unless every request ep got verifies and carries the signature an
// independent HMAC-SHA256 of id.timestamp.body makes.
func checkSignatures(t *testing.T, secret string, ep *endpoint) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, webhook.SecretPrefix))
	if err != nil {
		t.Error(err)
		return
	}
	for _, r := range ep.requests() {
		if r.verify != nil || r.path != "/orders" {
			t.Errorf("request to %s: Verify = %v", r.path, r.verify)
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(r.header.Get(webhook.HeaderID) + "." + r.header.Get(webhook.HeaderTimestamp) + "."))
		m.Write(r.body)
		if want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); r.header.Get(webhook.HeaderSignature) != want {
			t.Errorf("webhook-signature %q, want %q (HMAC-SHA256 of id.timestamp.body)", r.header.Get(webhook.HeaderSignature), want)
		}
	}
}
