// Package base holds the values that the root package txinbox exports and that the internal packages
// need as well: the default schema's name, the sentinel errors the internal packages wrap, and how a
// schema's notification channels are named. The
// root package's DefaultSchema, ErrNotMigrated and ErrPooler are these values (documented there), so
// that errors.Is matches the errors of both. It imports the standard library only: like every
// package under internal/, it imports no package of txinbox outside internal/.
package base

import (
	"errors"
	"fmt"
	"hash/fnv"
)

// DefaultSchema is the schema of a txinbox.Store whose Schema is empty (txinbox.DefaultSchema).
const DefaultSchema = "public"

// ErrNotMigrated is txinbox.ErrNotMigrated: a schema without txinbox's tables.
var ErrNotMigrated = errors.New("txinbox: the schema has no txinbox tables (run migrate.Up, or the command \"txinbox migrate up\", on it first)")

// ErrPooler is txinbox.ErrPooler: a connection pooler in the way.
var ErrPooler = errors.New("txinbox: a connection pooler is in the way")

// maxChannelBytes is the longest channel name PostgreSQL accepts (NAMEDATALEN - 1).
const maxChannelBytes = 63

// Channel returns the notification channel named prefix of schema (empty: DefaultSchema): prefix
// followed by the schema name, or, when that would exceed the 63 bytes PostgreSQL allows a channel
// name, prefix followed by 16 hex digits of a hash (FNV-1a, 64 bits) of the schema name.
func Channel(prefix, schema string) string {
	if schema == "" {
		schema = DefaultSchema
	}
	if c := prefix + schema; len(c) <= maxChannelBytes {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("%s%016x", prefix, h.Sum64())
}
