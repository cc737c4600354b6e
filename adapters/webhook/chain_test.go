package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/chaintest"
	"github.com/txinbox/txinbox/adapters/webhook"
	"github.com/txinbox/txinbox/outbox"
)

func TestMain(m *testing.M) { chaintest.Main(m, chain) }

// chain is the webhook link of the two-service chain: the orders service's relay POSTs each event,
// signed, to the billing service's Receiver, served on a local address that Setup picks (each
// restarted consumer process serves the same one).
var chain = chaintest.Broker{
	Name: "webhook",
	Setup: func(t *testing.T) chaintest.Params {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		return chaintest.Params{"addr": addr, "secret": webhook.NewSecret(), chaintest.ParamTopic: "orders"}
	},
	Publisher: func(_ context.Context, p chaintest.Params) (outbox.Publisher, error) {
		return webhook.New(webhook.Config{URL: "http://" + p["addr"] + "/events", Secret: p["secret"], Timeout: 2 * time.Second})
	},
	Consumer: func(_ context.Context, p chaintest.Params, sink adapters.SinkConfig, batch adapters.BatchConfig) (chaintest.Consumer, error) {
		r, err := webhook.NewReceiver(webhook.ReceiverConfig{Secret: p["secret"], Sink: sink, WriteTimeout: batch.WriteTimeout})
		if err != nil {
			return nil, err
		}
		return &serving{addr: p["addr"], srv: &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}, nil
	},
}

// serving serves a Receiver on addr (chaintest.Consumer).
type serving struct {
	addr string
	srv  *http.Server
	done chan struct{}
}

func (s *serving) Start(context.Context) error {
	var ln net.Listener
	var err error
	// A killed process's address may take a moment to be free again.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ln, err = net.Listen("tcp", s.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	}()
	return nil
}

func (s *serving) Stop(ctx context.Context) error { return s.srv.Shutdown(ctx) }

func (s *serving) Done() <-chan struct{} { return s.done }

// TestChain runs the chain through webhooks (chaintest.Run): the relay and the receiving process are
// SIGKILLed and restarted mid-stream, and every event must be applied exactly once, each key in
// order, with no key, kind or ordering configuration on the receiver.
func TestChain(t *testing.T) {
	t.Parallel()
	chaintest.Run(t, chain)
}
