package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ListenConnectFunc opens a connection for a relay to listen on (RelayConfig.ListenConnect).
type ListenConnectFunc func(ctx context.Context) (*pgx.Conn, error)

// Wake-ups: a relay listens (LISTEN) on NotifyChannel(store) on a connection of its own, and every
// notification wakes its runners. Publishing Clients notify at most once per Store.NotifyInterval;
// the events in between are found by the fast polling a relay keeps up for HotWindow after any
// activity. Polling at PollInterval remains the fallback: when listening is disabled or impossible,
// or while the listening connection is down. (Unlike a worker pool, a relay does not check that
// notifications come back through a pooler: behind PgBouncer in transaction mode, set DisableListen.)

const (
	listenPing       = 30 * time.Second // an idle listening connection is pinged this often
	listenMaxBackoff = 30 * time.Second // longest wait between reconnection attempts
)

func (r *Relay) listenConnector() ListenConnectFunc {
	if r.cfg.ListenConnect != nil {
		return r.cfg.ListenConnect
	}
	pool, ok := r.db.(*pgxpool.Pool)
	if !ok {
		return nil
	}
	cc := pool.Config().ConnConfig // a copy
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "txinbox outbox listener"
	}
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) }
}

// listen keeps a listening connection up until the relay stops, reconnecting with exponential
// backoff (100ms doubling to 30s) when it is lost.
func (r *Relay) listen(ctx context.Context, connect ListenConnectFunc) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	channel := NotifyChannel(r.store)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := r.listenOnce(ctx, connect, channel)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = 100 * time.Millisecond // it was up for a while: a fresh failure
		}
		r.cfg.Logger.Warn("txinbox: outbox relay not listening; polling until the listening connection is back",
			"schema", r.store.Schema, "err", err, "retry_in", backoff)
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

// listenOnce opens a connection, listens, and wakes the relay on every notification until the
// connection fails or ctx ends.
func (r *Relay) listenOnce(ctx context.Context, connect ListenConnectFunc, channel string) error {
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
	r.listenPID.Store(conn.PgConn().PID())
	defer r.listenPID.Store(0)
	r.Wake() // events may have been committed while nobody listened
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			r.notified.Add(1)
			r.Wake()
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
