package schemasql

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox/internal/sqlc"
)

// errCaptured is what a captured statement returns to the generated code that sent it.
var errCaptured = errors.New("txinbox: statement captured, not sent")

// Capture returns the text and arguments of the statement that call sends, without sending it: call
// runs one generated query on a sqlc.DBTX that only keeps what it is given (the query's own result
// is errCaptured, to be ignored). Used to queue a generated statement in a pipeline that reads its
// rows another way, and by the plan tests, which EXPLAIN a statement with its arguments.
func Capture(call func(db sqlc.DBTX)) (sql string, args []any) {
	c := &captured{}
	call(c)
	return c.sql, c.args
}

type captured struct {
	sql  string
	args []any
}

func (c *captured) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, errCaptured
}

func (c *captured) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errCaptured
}

func (c *captured) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	c.sql, c.args = sql, args
	return capturedRow{}
}

type capturedRow struct{}

func (capturedRow) Scan(...any) error { return errCaptured }
