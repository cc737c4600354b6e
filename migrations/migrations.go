// Package migrations embeds txinbox's goose SQL migrations.
//
// The files are plain goose migrations (goose v3.28.0 is the version tested). Table names in them are
// unqualified: they go into the first schema on search_path. migrate.Up applies them from Go and
// creates that schema first. The goose CLI runs them unchanged but does not create the schema (it
// fails with "no schema has been selected to create in"); with txinbox's version table, it shares
// migrate.Up's state. From an application's module:
//
//	psql "$DATABASE_URL" -c 'CREATE SCHEMA IF NOT EXISTS myschema'
//	PGOPTIONS='-c search_path=myschema' goose -dir "$(go list -m -f '{{.Dir}}' github.com/txinbox/txinbox)/migrations" \
//	  -table txinbox_db_version postgres "$DATABASE_URL" up
//
// docs/migrations.md in the repository has down, status, and the txinbox command.
package migrations

import "embed"

// FS holds the migration files (*.sql) at its root.
//
//go:embed *.sql
var FS embed.FS
