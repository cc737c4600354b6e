// Package migrations embeds txinbox's goose SQL migrations.
//
// The files are plain goose migrations: migrate.Up applies them from Go, and they run unchanged
// with the goose CLI:
//
//	goose -dir migrations -table txinbox_db_version postgres "$DATABASE_URL&search_path=myschema" up
//
// Table names in them are unqualified: the schema is the first one on search_path.
package migrations

import "embed"

// FS holds the migration files (*.sql) at its root.
//
//go:embed *.sql
var FS embed.FS
