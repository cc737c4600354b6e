package worker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// attempt is a finished attempt, as a Store's Tracer is told of it (txinbox.OpHandled).
type attempt struct {
	Start txinbox.TraceStart // the message (Messages[0]) and the attempt's number
	End   txinbox.TraceEnd   // its outcome, reason and error
}

// eventLog is a Store's Tracer that passes every finished attempt on, so that an example can wait
// for the attempts it expects instead of sleeping. Its TraceStart keeps the start in the context, for
// TraceEnd: the pattern of every tracer.
type eventLog chan attempt

type startKey struct{}

func (l eventLog) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	if d.Op != txinbox.OpHandled {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, d)
}

func (l eventLog) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	if s, ok := ctx.Value(startKey{}).(txinbox.TraceStart); ok && d.Op == txinbox.OpHandled {
		l <- attempt{Start: s, End: d}
	}
}

type cardCharge struct {
	Card  string `json:"card"`
	Cents int64  `json:"cents"`
}

// An error wrapped with Permanent makes the message dead at once, whatever MaxAttempts: no retry can
// fix a declined card. The message is kept, with its error, for ReplayDead or DiscardDead.
func ExamplePermanent() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	store := txinbox.Store{DB: db, Schema: schema}
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		panic(err)
	}
	ops, err := admin.New(store, admin.Config{}) // an operator's view of stored messages
	if err != nil {
		panic(err)
	}

	handlers := worker.NewHandlers()
	worker.Handle(handlers, "ChargeCard", func(ctx context.Context, tx pgx.Tx, m *worker.Message[cardCharge]) error {
		if m.Payload.Card == "4000-0000-0000-0002" {
			return txinbox.Permanent(errors.New("card declined"))
		}
		return nil
	})
	events := make(eventLog, 16)
	store.Tracer = events
	pool, err := worker.New(store, worker.Config{Consumer: "payments", Handlers: handlers, MaxAttempts: 5})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = pool.Stop(ctx) }()

	r, err := client.Receive(ctx, inbox.Message{Consumer: "payments", Key: "charge-1", Kind: "ChargeCard",
		Payload: []byte(`{"card": "4000-0000-0000-0002", "cents": 500}`)})
	if err != nil {
		panic(err)
	}
	e := <-events
	fmt.Println("attempt", e.Start.Attempt, "->", e.End.Outcome, e.End.Reason, txinbox.IsPermanent(e.End.Err))
	fmt.Println("error:", e.End.Err)

	m, err := ops.GetMessage(ctx, r.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("stored:", m.State, m.AttemptsStarted, "attempt of 5,", m.LastError)
	// Output:
	// attempt 1 -> dead permanent true
	// error: permanent: card declined
	// stored: dead 1 attempt of 5, permanent: card declined
}
