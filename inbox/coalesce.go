package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
)

// Coalesced receives: concurrent Receive calls of one Client share ReceiveBatch statements, group
// commit style. There is no long-lived goroutine. A call arriving when no shared statement of the
// Client is running sends its message at once, alone. A call arriving while one runs joins the group
// that fills meanwhile; that group is sent when a running statement finishes, when it holds
// CoalesceMax calls, or CoalesceWait after its first call arrived, whichever comes first. Each sent
// group runs in a goroutine of its own (one statement, as ReceiveMany, with its follow-up lookups),
// and every call of the group waits for it or for its own ctx.

// Defaults of Config's coalescing fields (documented on the fields).
const (
	defaultCoalesceMax  = 64
	defaultCoalesceWait = 500 * time.Microsecond
)

// coalescer groups the concurrent Receive calls of one Client.
type coalescer struct {
	c    *Client
	max  int
	wait time.Duration

	mu      sync.Mutex
	open    *group // the group filling, or nil
	running int    // groups whose statement is running
}

// group is the calls that share one statement.
type group struct {
	calls   []*call
	live    int  // calls still waiting for the result (not given up)
	started bool // sent: its messages are (being) written
	timer   *time.Timer
	ctx     context.Context // the statement's; cancelled when every call has given up
	cancel  context.CancelFunc
	done    chan struct{} // closed once every live call's rc and err are set
}

// call is one Receive call waiting in a group.
type call struct {
	msg  Message
	rc   Receipt // valid when err is nil
	err  error   // of the call: the statement's, or its own message's
	gone bool    // its ctx ended first: it returned ctx.Err()
}

// coalesces reports whether Receive calls of a Client of db share statements: not when coalescing is
// off, nor on a single connection or a transaction, which cannot run statements concurrently (and
// whose commit is the caller's).
func coalesces(db any, maxCalls int) bool {
	switch db.(type) {
	case pgx.Tx, *pgx.Conn:
		return false
	}
	return maxCalls > 1
}

// receive queues msg, already validated, and returns its receipt once the statement it was sent
// with has finished, or ctx.Err() if ctx ends first.
func (co *coalescer) receive(ctx context.Context, msg Message) ([]Receipt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The statement may still read the message after a caller gave up and reused its buffers.
	msg.Payload = bytes.Clone(msg.Payload)
	msg.Headers = maps.Clone(msg.Headers)
	cl := &call{msg: msg}

	co.mu.Lock()
	g := co.open
	if g == nil {
		g = &group{done: make(chan struct{})}
		co.open = g
	}
	g.calls = append(g.calls, cl)
	g.live++
	switch {
	case g.live >= co.max || co.running == 0:
		// Full, or nobody to wait for: an idle Client adds no wait.
		co.startLocked(g)
	case g.timer == nil:
		g.timer = time.AfterFunc(co.wait, func() {
			co.mu.Lock()
			defer co.mu.Unlock()
			if co.open == g {
				co.startLocked(g)
			}
		})
	}
	co.mu.Unlock()

	select {
	case <-g.done:
		return []Receipt{cl.rc}, cl.err
	case <-ctx.Done():
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	select {
	case <-g.done: // finished meanwhile: the result is the truth
		return []Receipt{cl.rc}, cl.err
	default:
	}
	cl.gone = true
	g.live--
	if g.live == 0 {
		if !g.started {
			// Nothing of the group was sent: drop it.
			if g.timer != nil {
				g.timer.Stop()
			}
			if co.open == g {
				co.open = nil
			}
		} else {
			g.cancel() // nobody waits for the statement any more
		}
	}
	return nil, ctx.Err()
}

// startLocked sends g (co.mu held): it is no longer open, and a goroutine runs its statement.
func (co *coalescer) startLocked(g *group) {
	if co.open == g {
		co.open = nil
	}
	if g.timer != nil {
		g.timer.Stop()
	}
	g.started = true
	g.ctx, g.cancel = context.WithCancel(context.Background())
	var calls []*call
	for _, cl := range g.calls {
		if !cl.gone {
			calls = append(calls, cl)
		}
	}
	g.calls = calls
	co.running++
	go co.run(g)
}

// run stores g's messages in one statement and hands each call its receipt, then sends the group
// that filled meanwhile, if any.
func (co *coalescer) run(g *group) {
	defer func() {
		g.cancel()
		co.mu.Lock()
		co.running--
		if next := co.open; next != nil && next.live > 0 {
			co.startLocked(next)
		}
		co.mu.Unlock()
	}()
	defer close(g.done)
	msgs := make([]Message, len(g.calls))
	for i, cl := range g.calls {
		msgs[i] = cl.msg
	}
	rs, errs, err := co.store(g.ctx, msgs)
	for i, cl := range g.calls {
		switch {
		case err != nil:
			cl.err = err
		case errs[i] != nil:
			cl.err = errs[i]
		default:
			cl.rc = rs[i] // a Conflict's error is its Err
		}
	}
}

// store runs layers 3 to 6 for msgs of many calls, as ReceiveMany. A panic fails every call instead
// of the process. A statement that PostgreSQL refuses because of one message's value (a
// *txinbox.ValidationError: the Go-side checks let it through) is sent again one message at a time,
// so that only its own caller gets the error.
// It returns the receipts, or per message errors (when sent one at a time), or the error of all.
func (co *coalescer) store(ctx context.Context, msgs []Message) (rs []Receipt, errs []error, err error) {
	defer func() {
		if p := recover(); p != nil {
			rs, errs, err = nil, nil, fmt.Errorf("txinbox: shared receive statement panicked: %v", p)
		}
	}()
	errs = make([]error, len(msgs))
	rs, err = co.c.storeValid(ctx, co.c.store.DB, msgs)
	var ve *txinbox.ValidationError
	if len(msgs) == 1 || !errors.As(err, &ve) {
		return rs, errs, err
	}
	rs = make([]Receipt, len(msgs))
	for i := range msgs {
		one, err := co.c.storeValid(ctx, co.c.store.DB, msgs[i:i+1])
		if err != nil {
			errs[i] = err
			continue
		}
		rs[i] = one[0]
	}
	return rs, errs, nil
}
