// Package pooler finds out whether a connection pooler between txinbox and PostgreSQL keeps a server
// session for each client connection. PgBouncer in transaction mode does not: it hands a client a
// server session for one transaction at a time, so that what a session holds between transactions
// (a named prepared statement, a session advisory lock, a setting) is seen by other clients and lost
// by its own.
//
// Nothing a client is told proves the pooler's mode: PgBouncer passes the server's parameters
// through, and two transactions reporting two server sessions prove nothing of a pgxpool (each may
// run on another connection). What is proved is what is seen: a pooler gives each client a cancel
// key of its own, so that the process id it announces is not that of the session running its
// statements; and, once one is found, one client connection held by the probe seen on two server
// sessions, two seen on one, or a named prepared statement of one seen on the session another runs
// a transaction on, or gone from its own, proves that sessions are shared. The proof is one-sided: a busy pooler may hand each client another session than the one
// the probe needs to meet, and then nothing is proved (Probe tries three times). A quiet PgBouncer
// reuses the session released last, and is found at the first try.
package pooler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// Finding is what Probe saw.
type Finding struct {
	// Pooler: the process id the connection announced (its cancel key) is not that of the server
	// session running its statements: a pooler (PgBouncer, in any mode) is in between.
	Pooler bool
	// Shared: the server sessions are shared between client connections, one transaction at a time (a
	// pooler in transaction or statement mode). Session state (a session advisory lock, a SET) does
	// not last from one transaction to the next.
	Shared bool
	// Statements: a named prepared statement of one client connection was seen on the server session
	// of another, or was gone from its own: pgx's statement cache fails there ("prepared statement
	// \"stmtcache_…\" already exists", SQLSTATE 42P05). PgBouncer 1.21 and later with
	// max_prepared_statements above 0 keeps them per client, in transaction mode too.
	Statements bool
	// SearchPath is the search_path of the first connection's session, as its first statement found it.
	SearchPath string
}

// rounds is how many times Probe tries to meet a shared session before it concludes nothing.
const rounds = 3

// Probe runs its statements on a, and, once a pooler is found, on the connection second returns (a
// second client connection of the same pooler, given back with its release function; nil when
// there is none, which proves less). Its own statements run in pgx's exec mode, so that they need
// no named prepared statement; the one named prepared statement it makes is deallocated.
func Probe(ctx context.Context, a *pgx.Conn, second func(ctx context.Context) (*pgx.Conn, func())) (Finding, error) {
	var f Finding
	first, err := schemasql.Queries.SessionProbe(ctx, exec{a}, "")
	if err != nil {
		return f, err
	}
	f.SearchPath = first.SearchPath
	if uint32(first.Pid) == a.PgConn().PID() {
		return f, nil // a session of its own: no pooler
	}
	f.Pooler = true
	var b *pgx.Conn
	if second != nil {
		var release func()
		if b, release = second(ctx); b != nil {
			defer release()
		}
	}
	for range rounds {
		if err := probeOnce(ctx, a, b, int32(first.Pid), &f); err != nil || f.Shared {
			return f, err
		}
	}
	return f, nil
}

// probeOnce prepares a named statement on a and looks for it: on the session b runs a
// transaction on, and on a's own while b holds its session.
func probeOnce(ctx context.Context, a, b *pgx.Conn, firstPID int32, f *Finding) error {
	var r [8]byte
	_, _ = rand.Read(r[:])
	name := "txinbox_probe_" + hex.EncodeToString(r[:])
	text, _ := schemasql.Capture(func(db sqlc.DBTX) { _, _ = schemasql.Queries.BackendPID(ctx, db) })
	if _, err := a.PgConn().Prepare(ctx, name, text, nil); err != nil {
		return err
	}
	defer func() {
		// In transaction mode this may reach another session than the one holding the statement:
		// that one keeps it, under a name no client ever uses, until the pooler closes it.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = a.PgConn().Deallocate(dctx, name)
	}()
	lost := func() { f.Shared, f.Statements = true, true }
	pid, err := execPID(ctx, a, name)
	if isMissingStatement(err) {
		lost()
		return nil
	}
	if err != nil {
		return err
	}
	if pid != firstPID {
		f.Shared = true
	}
	if b != nil {
		tx, err := b.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		other, err := schemasql.Queries.SessionProbe(ctx, exec{tx}, name)
		if err != nil {
			return err
		}
		if other.Prepared {
			lost()
		}
		if other.Pid == pid {
			f.Shared = true
		}
	}
	// a again, while b holds its session (if any).
	again, err := execPID(ctx, a, name)
	if isMissingStatement(err) {
		lost()
		return nil
	}
	if err != nil {
		return err
	}
	if again != pid {
		f.Shared = true
	}
	return nil
}

// execPID runs the prepared statement name (BackendPID) on c.
func execPID(ctx context.Context, c *pgx.Conn, name string) (int32, error) {
	res := c.PgConn().ExecPrepared(ctx, name, nil, nil, nil).Read()
	if res.Err != nil {
		return 0, res.Err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return 0, fmt.Errorf("txinbox: probe: %d rows", len(res.Rows))
	}
	pid, err := strconv.ParseInt(string(res.Rows[0][0]), 10, 32)
	return int32(pid), err
}

// isMissingStatement reports whether err is PostgreSQL's "prepared statement ... does not exist".
func isMissingStatement(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "26000"
}

// exec runs every statement in pgx's exec mode: no named prepared statement.
type exec struct{ db sqlc.DBTX }

func (e exec) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return e.db.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (e exec) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return e.db.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (e exec) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return e.db.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

// NeedsSession reports whether statements run in mode need a server session that lasts from one
// round trip to the next: pgx's default, cache_statement (named prepared statements), and
// describe_exec (the unnamed statement described in one round trip is run in the next).
func NeedsSession(mode pgx.QueryExecMode) bool {
	return mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeDescribeExec
}

// secondTimeout bounds the wait for a second connection of a busy pgxpool: without one, the probe
// proves less.
const secondTimeout = 2 * time.Second

// checkTimeout bounds CheckPool: a pooler whose server connections are all taken makes its clients
// wait (PgBouncer's query_wait_timeout: 2 minutes).
const checkTimeout = 10 * time.Second

// Behind reports whether a pooler (PgBouncer, in any mode) is between db and PostgreSQL, when db is a
// *pgxpool.Pool: the process id one of its connections announced is not that of the server session
// running its statement (Finding.Pooler; see Pooled). For any other DB it returns false.
func Behind(ctx context.Context, db any) (bool, error) {
	pool, ok := db.(*pgxpool.Pool)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	c, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer c.Release()
	return Pooled(ctx, c.Conn())
}

// Pooled reports whether a pooler is between c and PostgreSQL: the process id c announced is not that
// of the server session running its statement. It runs one statement, in pgx's exec mode.
func Pooled(ctx context.Context, c *pgx.Conn) (bool, error) {
	row, err := schemasql.Queries.SessionProbe(ctx, exec{c}, "")
	if err != nil {
		return false, err
	}
	return uint32(row.Pid) != c.PgConn().PID(), nil
}

// CheckPool returns an error matching txinbox.ErrPooler if db is a *pgxpool.Pool whose statements
// need a server session across round trips (NeedsSession of its DefaultQueryExecMode) and Probe finds
// that its connections' named prepared statements are not kept (Finding.Statements). It returns nil
// for any other DB, a mode that needs no session, or when nothing is proved. Any other error is the
// probe's (the database did not answer within 10s): the caller goes on.
//
// Why refuse the pool rather than run txinbox's own statements in a mode that needs no named
// prepared statement: the handlers' statements (and the idempotency middleware's handler's) run on
// the same connections, in the same transactions, in the pool's mode. Only the pool's setting
// (default_query_exec_mode=exec) mends both; switching txinbox's alone would turn a refusal at start
// into handlers failing at random, retried until dead.
func CheckPool(ctx context.Context, db any) error {
	pool, ok := db.(*pgxpool.Pool)
	if !ok {
		return nil
	}
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	if !NeedsSession(mode) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	a, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer a.Release()
	f, err := Probe(ctx, a.Conn(), func(ctx context.Context) (*pgx.Conn, func()) {
		if pool.Config().MaxConns < 2 {
			return nil, nil
		}
		actx, cancel := context.WithTimeout(ctx, secondTimeout)
		defer cancel()
		b, err := pool.Acquire(actx)
		if err != nil {
			return nil, nil
		}
		return b.Conn(), b.Release
	})
	if err != nil {
		return fmt.Errorf("txinbox: probing for a connection pooler: %w", err)
	}
	if f.Statements {
		return schemasql.ErrPoolerStatements
	}
	return nil
}
