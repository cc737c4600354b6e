package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Wake-ups: a pool listens (LISTEN) on Store.NotifyChannel on a connection of its own, and a
// notification whose payload is its consumer wakes its runners at once. Receiving Clients notify at
// most once per Store.NotifyInterval per consumer; the messages in between are found by the
// fast polling a pool keeps up for HotWindow after any activity. Polling at PollInterval remains the
// fallback: when listening is disabled, impossible (no connector, a pooler in transaction mode that
// swallows notifications) or the listening connection is down.

// errListenUnsupported means LISTEN is accepted but notifications do not come back (a connection
// pooler in transaction mode, for example).
var errListenUnsupported = errors.New("notifications sent on the listening connection never arrived (a connection pooler in transaction mode?)")

const (
	listenProbeTimeout = 10 * time.Second // how long the check after LISTEN waits for its own notification
	listenPing         = 30 * time.Second // an idle listening connection is pinged this often
	listenMaxBackoff   = 30 * time.Second // longest wait between reconnection attempts
)

// listenConnector returns how the pool opens its listening connection, or nil if it cannot.
func (p *Pool) listenConnector() func(ctx context.Context) (*pgx.Conn, error) {
	if p.cfg.ListenConnect != nil {
		return p.cfg.ListenConnect
	}
	return p.connector("txinbox listener")
}

// connector returns how the pool opens a connection of its own outside its pgxpool (named
// applicationName unless the pool's configuration names it), or nil if db is not a *pgxpool.Pool.
func (p *Pool) connector(applicationName string) func(ctx context.Context) (*pgx.Conn, error) {
	pool, ok := p.db.(*pgxpool.Pool)
	if !ok {
		return nil
	}
	cc := pool.Config().ConnConfig // a copy
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = applicationName
	}
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) }
}

// listen keeps a listening connection up until the pool stops, reconnecting with exponential backoff
// (100ms doubling to 30s) when it is lost. If notifications prove not to come back, it checks again
// every 30s; the pool polls meanwhile.
func (p *Pool) listen(ctx context.Context, connect func(context.Context) (*pgx.Conn, error)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	channel := p.store.NotifyChannel()
	backoff := 100 * time.Millisecond
	unsupported := false // the last check showed that notifications do not come back
	for ctx.Err() == nil {
		began := time.Now()
		err := p.listenOnce(ctx, connect, channel)
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
				p.cfg.Logger.Warn("txinbox: LISTEN does not work on this connection; polling (set DisableListen if connections go through a pooler in transaction mode)",
					"consumer", p.cfg.Consumer, "channel", channel, "poll_interval", p.cfg.PollInterval, "check_again_in", backoff)
			}
			unsupported = true
		} else {
			unsupported = false
			p.cfg.Logger.Warn("txinbox: not listening; polling until the listening connection is back",
				"consumer", p.cfg.Consumer, "err", err, "retry_in", backoff)
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

// listenOnce opens a connection, listens, checks that a notification comes back, then wakes the pool on
// every notification for its consumer until the connection fails or ctx ends.
func (p *Pool) listenOnce(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), channel string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := connect(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The check: our own notification must come back. A payload with a space never names a consumer.
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	probe := "txinbox probe " + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", channel, probe); err != nil {
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
		p.notified(n.Payload)
	}
	p.listenPID.Store(conn.PgConn().PID())
	defer p.listenPID.Store(0)
	// Messages may have arrived while nobody listened.
	p.Wake()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			p.notified(n.Payload)
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

// notified handles a notification: wake the pool if it names its consumer.
func (p *Pool) notified(payload string) {
	if payload == p.cfg.Consumer {
		p.notifications.Add(1)
		p.Wake()
	}
}
