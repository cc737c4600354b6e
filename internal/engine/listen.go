package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wake-ups: an engine listens (LISTEN) on Listen.Channel on a connection of its own, and a
// notification whose payload Listen.Wakes accepts wakes its runners at once. Notifiers debounce
// (Store.NotifyInterval); what arrives in between is found by the fast polling an engine keeps up for
// HotWindow after any activity. Polling at PollInterval remains the fallback: when listening is off
// or impossible (no connector, a pooler in transaction mode that swallows notifications), or while
// the listening connection is down.

// errListenUnsupported means LISTEN is accepted but notifications do not come back (a connection
// pooler in transaction mode, for example).
var errListenUnsupported = errors.New("notifications sent on the listening connection never arrived (a connection pooler in transaction mode?)")

// ProbePrefix starts the payload of the notification an engine sends itself after LISTEN to check
// that notifications come back; it holds a space, so it never names a consumer.
const ProbePrefix = "txinbox probe "

const (
	listenProbeTimeout = 10 * time.Second // how long the check after LISTEN waits for its own notification
	listenPing         = 30 * time.Second // an idle listening connection is pinged this often
	listenMaxBackoff   = 30 * time.Second // longest wait between reconnection attempts
)

// listen keeps a listening connection up until the engine stops, reconnecting with exponential
// backoff (100ms doubling to 30s) when it is lost. If notifications prove not to come back, it
// checks again every 30s; the runners poll meanwhile.
func (e *Engine) listen(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	channel := e.cfg.Listen.Channel
	backoff := 100 * time.Millisecond
	unsupported := false // the last check showed that notifications do not come back
	for ctx.Err() == nil {
		began := time.Now()
		err := e.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = 100 * time.Millisecond // it was up for a while: a fresh failure
		}
		if errors.Is(err, errListenUnsupported) {
			// A pooler in transaction mode, or a server too slow to answer the check: poll, and check
			// again now and then.
			backoff = listenMaxBackoff
			if !unsupported {
				e.cfg.Logger.Warn("txinbox: LISTEN does not work on this connection; polling (make Store.NotifyInterval negative if connections go through a pooler in transaction mode)",
					append(e.cfg.Attrs, "channel", channel, "poll_interval", e.cfg.PollInterval, "check_again_in", backoff)...)
			}
			unsupported = true
		} else {
			unsupported = false
			e.cfg.Logger.Warn("txinbox: not listening; polling until the listening connection is back",
				append(e.cfg.Attrs, "err", err, "retry_in", backoff)...)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(backoff*2, listenMaxBackoff)
	}
}

// listenOnce opens a connection, listens, checks that a notification comes back, then wakes the
// engine on every notification it accepts until the connection fails or ctx ends.
func (e *Engine) listenOnce(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := e.cfg.Listen.Connect(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	channel := e.cfg.Listen.Channel
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The check: our own notification, sent from another connection, must come back. Not from this
	// one: a pooler in transaction mode (PgBouncer) hands a session's own notification back to the
	// client whose transaction sent it, but none sent by another session while the listening
	// session sits in the pool.
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	probe := ProbePrefix + hex.EncodeToString(b)
	if err := e.notifyProbe(ctx, probe); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	deadline := time.Now().Add(listenProbeTimeout)
	for {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil && !conn.IsClosed() {
				return errListenUnsupported
			}
			return err
		}
		if n.Payload == probe {
			break
		}
		e.notified(n.Payload)
	}
	e.listenPID.Store(conn.PgConn().PID())
	defer e.listenPID.Store(0)
	e.Wake() // work may have arrived while nobody listened
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			e.notified(n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil && !conn.IsClosed():
			// Quiet for a while: make sure the connection is still alive.
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		default:
			return err
		}
	}
}

// notifyProbe sends the check's notification on a connection of its own (in pgx's exec mode: no
// named prepared statement, which a pooler in transaction mode would not keep).
func (e *Engine) notifyProbe(ctx context.Context, probe string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := e.cfg.Listen.Connect(cctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.WithoutCancel(cctx)) }()
	_, err = c.Exec(cctx, "SELECT pg_notify($1, $2)", pgx.QueryExecModeExec, e.cfg.Listen.Channel, probe)
	return err
}

// notified handles a notification: wake the engine if it is one for it.
func (e *Engine) notified(payload string) {
	if len(payload) >= len(ProbePrefix) && payload[:len(ProbePrefix)] == ProbePrefix {
		return // another listener's check
	}
	if e.cfg.Listen.Wakes == nil || e.cfg.Listen.Wakes(payload) {
		e.notifications.Add(1)
		e.Wake()
	}
}
