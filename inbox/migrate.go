package inbox

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

// NewMigrator opens a dedicated connection pool from connConfig (usually pool.Config().ConnConfig)
// with search_path set to schema, and creates the schema if it is missing. Close it when done.
// logger may be nil.
func NewMigrator(ctx context.Context, connConfig *pgx.ConnConfig, schema string, logger *slog.Logger) (*Migrator, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	cfg := connConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(2)
	if err := createSchema(ctx, db, schema); err != nil {
		db.Close()
		return nil, err
	}
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

// Up applies every pending migration.
func (m *Migrator) Up(ctx context.Context) ([]MigrationResult, error) {
	rs, err := m.provider.Up(ctx)
	return results(rs, true), err
}

// Down rolls back the most recent migration.
func (m *Migrator) Down(ctx context.Context) ([]MigrationResult, error) {
	r, err := m.provider.Down(ctx)
	if r == nil {
		return nil, err
	}
	return results([]*goose.MigrationResult{r}, false), err
}

// DownTo rolls back migrations down to version (0: all of them).
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]MigrationResult, error) {
	rs, err := m.provider.DownTo(ctx, version)
	return results(rs, false), err
}

// Status lists every migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]MigrationResult, error) {
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

// Migrate creates schema if needed and applies every pending migration to it. It is safe to call
// from every process at start-up.
func Migrate(ctx context.Context, connConfig *pgx.ConnConfig, schema string) error {
	m, err := NewMigrator(ctx, connConfig, schema, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}
