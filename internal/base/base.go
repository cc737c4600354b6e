// Package base holds the values that the root package txinbox exports and that the internal packages
// need as well: the default schema's name and the sentinel errors the internal packages wrap. The
// root package's DefaultSchema, ErrNotMigrated and ErrPooler are these values (documented there), so
// that errors.Is matches the errors of both. It imports the standard library only: like every
// package under internal/, it imports no package of txinbox outside internal/.
package base

import "errors"

// DefaultSchema is the schema of a txinbox.Store whose Schema is empty (txinbox.DefaultSchema).
const DefaultSchema = "public"

// ErrNotMigrated is txinbox.ErrNotMigrated: a schema without txinbox's tables.
var ErrNotMigrated = errors.New("txinbox: the schema has no txinbox tables (run migrate.Up, or the command \"txinbox migrate up\", on it first)")

// ErrPooler is txinbox.ErrPooler: a connection pooler in the way.
var ErrPooler = errors.New("txinbox: a connection pooler is in the way")
