package txinbox

import (
	"errors"
	"fmt"

	"github.com/txinbox/txinbox/internal/base"
)

// ErrInvalidConfig is matched (errors.Is) by every *[ConfigError].
var ErrInvalidConfig = errors.New("txinbox: invalid configuration")

// ErrInvalidArgument is matched (errors.Is) by every *[ArgumentError].
var ErrInvalidArgument = errors.New("txinbox: invalid argument")

// ErrNotMigrated is matched (errors.Is) by the error of a component that found its schema without
// txinbox's tables (worker.Pool.Start, a receive or an admin call; the idempotency middleware logs
// it and answers ProblemNotMigrated): run migrate.Up (or "txinbox migrate up") on that schema first.
var ErrNotMigrated = base.ErrNotMigrated

// ErrPooler is matched (errors.Is) by the error of a component that found a connection pooler
// (PgBouncer) between it and PostgreSQL that it cannot work through; the message says what to set or
// where to connect. Through a pooler in transaction mode that does not keep named prepared
// statements per client (PgBouncer before 1.21, or with max_prepared_statements = 0), when the
// pgxpool runs statements in pgx's default query exec mode: worker.Pool.Start and outbox.Relay.Start
// refuse to start, and a statement that fails on another client's named prepared statement (SQLSTATE
// 42P05 or 26000), such as an inbox receive's or the idempotency middleware's, returns it; the fix is
// default_query_exec_mode=exec. Package migrate returns it for a pooler in transaction mode, or one
// that refuses or drops the search_path startup parameter: migrations need a session of their own.
// A pooler in session mode, or one that keeps named prepared statements per client, is not reported.
var ErrPooler = base.ErrPooler

// ErrTxManaged is returned by Commit and Rollback of a transaction txinbox hands to user code and
// ends itself: a worker handler's transaction and the idempotency middleware's request transaction.
var ErrTxManaged = errors.New("txinbox: the transaction is committed or rolled back by txinbox")

// ErrInvalidMessage is matched (errors.Is) by every *[ValidationError]: a message was rejected
// before anything of its call was written.
var ErrInvalidMessage = errors.New("txinbox: invalid message")

// ConfigError reports an invalid configuration field. Nothing was started or written.
type ConfigError struct {
	Field  string // such as "Store.Schema" or "Lease"
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("txinbox: invalid configuration: %s: %s", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidConfig].
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// ArgumentError reports an invalid argument of a call (an admin action, a cleaning pass). Nothing
// was changed.
type ArgumentError struct {
	Name   string // the argument or field, such as "Limit" or "states"
	Reason string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("txinbox: invalid argument: %s: %s", e.Name, e.Reason)
}

// Is reports whether target is [ErrInvalidArgument].
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// ValidationError says which message of a call (Index) and which of its fields was rejected, and
// why: an inbox message of a receive call (inbox.Client.Receive and the others) or an outbox message
// of a Publish call (outbox.Client.Publish). Nothing of the call that returned it was written.
type ValidationError struct {
	// Index is the message's position in the call's messages; 0 for a single message.
	Index int
	// Field names the field: for an inbox message "consumer", "key", "kind", "payload", "headers",
	// "ordering_key" or "raw" (an undecodable message's); for an outbox message "topic", "key",
	// "kind", "content_type", "payload", "headers" or "not_before".
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("txinbox: invalid message %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidMessage].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidMessage }

// PermanentError marks an error that no retry can fix: a worker handler's (its message is dead at
// once) or an outbox Publisher's for an event (the broker refuses the event itself: it is dead at
// once). Make one with [Permanent]; test for one with [IsPermanent].
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns Err.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err in a *[PermanentError], so that its message or event is dead at once instead
// of retried. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is or wraps a *[PermanentError], however deep (errors.As: through
// fmt.Errorf's %w, errors.Join and an outbox BatchError alike).
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
