// Package migrate creates and upgrades txinbox's tables in a schema: it applies the embedded goose
// migrations of package migrations, keeping their state in [VersionTable] of that schema.
//
// [Up] is the one call most programs need, at start-up, with the same [txinbox.Store] as the other
// components; a [Migrator] ([New]) also rolls back and reports the state.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrations"
)

// VersionTable is the goose version table txinbox keeps in its schema, apart from any goose table of
// the application's own. Pass it to the goose CLI with -table to share the migration state.
const VersionTable = "txinbox_db_version"

// Migrator applies txinbox's embedded goose migrations to one schema. Two processes migrating the
// same schema at once are safe: goose's Postgres session locker (an advisory lock derived from the
// schema name) serialises them.
type Migrator struct {
	db       *sql.DB
	provider *goose.Provider
	schema   string
}

// MigrationResult is one migration applied or rolled back.
type MigrationResult struct {
	Version int64
	Name    string
	Applied bool // after the call
}

// New returns a Migrator of store's schema. It opens a dedicated connection pool from connConfig
// (usually pool.Config().ConnConfig) with search_path set to the schema; store.DB is not used and may
// be nil. It writes nothing: [Migrator.Up] creates the schema if it is missing. Close it when done.
// logger may be nil. Of store, only Schema is used (empty: txinbox.DefaultSchema); an invalid one
// returns a *[txinbox.ConfigError].
func New(ctx context.Context, connConfig *pgx.ConnConfig, store txinbox.Store, logger *slog.Logger) (*Migrator, error) {
	schema := store.Schema
	if schema == "" {
		schema = txinbox.DefaultSchema
	}
	if err := txinbox.ValidateSchema(schema); err != nil {
		return nil, err
	}
	if connConfig == nil {
		return nil, &txinbox.ConfigError{Field: "connConfig", Reason: "is required"}
	}
	cfg := connConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(2)
	h := fnv.New64a()
	h.Write([]byte("txinbox.migrate:" + schema))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64() >> 1)))
	if err != nil {
		db.Close()
		return nil, err
	}
	opts := []goose.ProviderOption{
		goose.WithSessionLocker(locker),
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
	}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger), goose.WithVerbose(true))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Migrator{db: db, provider: p, schema: schema}, nil
}

func createSchema(ctx context.Context, db *sql.DB, schema string) error {
	_, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06") {
		return nil // created concurrently by another process
	}
	if err != nil {
		return fmt.Errorf("txinbox: create schema %s: %w", schema, err)
	}
	return nil
}

// Close closes the migrator's connections.
func (m *Migrator) Close() error { return m.db.Close() }

// Up creates the schema if it is missing and applies every pending migration. It returns the
// migrations applied, none when the schema was up to date.
func (m *Migrator) Up(ctx context.Context) ([]MigrationResult, error) {
	if err := createSchema(ctx, m.db, m.schema); err != nil {
		return nil, err
	}
	rs, err := m.provider.Up(ctx)
	return results(rs, true), err
}

// UpTo creates the schema if it is missing and applies the pending migrations up to version
// (included). It returns the migrations applied, none when the schema was already at or past version.
func (m *Migrator) UpTo(ctx context.Context, version int64) ([]MigrationResult, error) {
	if err := createSchema(ctx, m.db, m.schema); err != nil {
		return nil, err
	}
	rs, err := m.provider.UpTo(ctx, version)
	return results(rs, true), err
}

// Down rolls back the most recent migration and returns it. When no migration is applied (the
// schema or its VersionTable does not exist, or every migration is already rolled back) it returns
// no result and a nil error, and writes nothing.
func (m *Migrator) Down(ctx context.Context) ([]MigrationResult, error) {
	if migrated, err := m.versionTableExists(ctx); err != nil || !migrated {
		return nil, err
	}
	r, err := m.provider.Down(ctx)
	if errors.Is(err, goose.ErrNoNextVersion) {
		return nil, nil
	}
	if r == nil {
		return nil, err
	}
	return results([]*goose.MigrationResult{r}, false), err
}

// DownTo rolls back migrations down to version (0: all of them) and returns those rolled back. Like
// Down, it writes nothing when no migration is applied.
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]MigrationResult, error) {
	if migrated, err := m.versionTableExists(ctx); err != nil || !migrated {
		return nil, err
	}
	rs, err := m.provider.DownTo(ctx, version)
	return results(rs, false), err
}

// SchemaState is whether a schema exists and was ever migrated.
type SchemaState struct {
	SchemaExists bool // the schema exists
	Migrated     bool // it holds VersionTable: Up (or the goose CLI) ran in it at least once
}

// State reports whether the schema exists and holds VersionTable. It writes nothing.
func (m *Migrator) State(ctx context.Context) (SchemaState, error) {
	var st SchemaState
	err := m.db.QueryRowContext(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
		EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		        WHERE n.nspname = $1 AND c.relname = $2)`, m.schema, VersionTable).Scan(&st.SchemaExists, &st.Migrated)
	if err != nil {
		return SchemaState{}, fmt.Errorf("txinbox: migration state of schema %s: %w", m.schema, err)
	}
	return st, nil
}

func (m *Migrator) versionTableExists(ctx context.Context) (bool, error) {
	st, err := m.State(ctx)
	return st.Migrated, err
}

// Status lists every migration and whether it is applied. It writes nothing: in a schema that does
// not exist or was never migrated (see State) every migration is listed as not applied.
func (m *Migrator) Status(ctx context.Context) ([]MigrationResult, error) {
	migrated, err := m.versionTableExists(ctx)
	if err != nil {
		return nil, err
	}
	if !migrated {
		var out []MigrationResult
		for _, s := range m.provider.ListSources() {
			out = append(out, MigrationResult{Version: s.Version, Name: s.Path})
		}
		return out, nil
	}
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]MigrationResult, len(st))
	for i, s := range st {
		out[i] = MigrationResult{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied}
	}
	return out, nil
}

func results(rs []*goose.MigrationResult, up bool) []MigrationResult {
	out := make([]MigrationResult, 0, len(rs))
	for _, r := range rs {
		if r == nil || r.Source == nil {
			continue
		}
		out = append(out, MigrationResult{Version: r.Source.Version, Name: r.Source.Path, Applied: up && r.Error == nil})
	}
	return out
}

// Up creates store.Schema if needed and applies every pending migration to it. It is safe to call
// from every process at start-up. It connects with the configuration of store.DB, which must be a
// *pgxpool.Pool or a *pgx.Conn (on its own connections: never inside a transaction of the caller);
// for any other DB it returns a *[txinbox.ConfigError]: use [New] with a *pgx.ConnConfig then.
func Up(ctx context.Context, store txinbox.Store) error {
	var cc *pgx.ConnConfig
	switch db := store.DB.(type) {
	case *pgxpool.Pool:
		cc = db.Config().ConnConfig
	case *pgx.Conn:
		cc = db.Config()
	default:
		return &txinbox.ConfigError{Field: "Store.DB", Reason: fmt.Sprintf("migrate.Up needs a *pgxpool.Pool or a *pgx.Conn to take its connection settings from, not %T: use migrate.New(ctx, connConfig, store, logger) and Migrator.Up", store.DB)}
	}
	m, err := New(ctx, cc, store, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}
