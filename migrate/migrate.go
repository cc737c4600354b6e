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
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/pooler"
	"github.com/txinbox/txinbox/migrations"
)

// VersionTable is the goose version table txinbox keeps in its schema, apart from any goose table of
// the application's own. Pass it to the goose CLI with -table to share the migration state.
const VersionTable = "txinbox_db_version"

// Migrator applies txinbox's embedded goose migrations to one schema. Two processes migrating the
// same schema at once are safe: goose's Postgres session locker (an advisory lock derived from the
// schema name) serialises them.
//
// Its connections need a session of their own, for that lock and for the search_path it sets when
// they start: a direct connection to PostgreSQL, or a pooler in session mode that passes search_path
// on. Up, UpTo, Down and DownTo check it first, and return an error matching [txinbox.ErrPooler],
// having written nothing, when they find a pooler in transaction mode (PgBouncer's pool_mode =
// transaction), or one that refuses or drops the search_path startup parameter (PgBouncer 1.18 in
// any mode; dropped with ignore_startup_parameters, it would migrate the role's default schema).
type Migrator struct {
	db       *sql.DB
	cc       *pgx.ConnConfig // the connections' configuration, search_path set
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
	return &Migrator{db: db, cc: cfg, provider: p, schema: schema}, nil
}

// checkSession returns an error matching txinbox.ErrPooler when the migrator's connections have no
// session of their own (see [Migrator]). It opens two connections of its own, and one only when no
// pooler is found.
func (m *Migrator) checkSession(ctx context.Context) error {
	const direct = "run migrations on a direct connection to PostgreSQL"
	a, err := pgx.ConnectConfig(ctx, m.cc)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Message, "unsupported startup parameter") {
			return fmt.Errorf("%w: it refuses the search_path that migrate sets when a connection starts: %s: %w", txinbox.ErrPooler, direct, err)
		}
		return fmt.Errorf("txinbox: migrate: connect: %w", err)
	}
	defer func() { _ = a.Close(context.WithoutCancel(ctx)) }()
	f, err := pooler.Probe(ctx, a, func(ctx context.Context) (*pgx.Conn, func()) {
		b, err := pgx.ConnectConfig(ctx, m.cc)
		if err != nil {
			return nil, nil
		}
		return b, func() { _ = b.Close(context.WithoutCancel(ctx)) }
	})
	switch {
	case err != nil:
		return fmt.Errorf("txinbox: migrate: probing for a connection pooler: %w", err)
	case f.Shared:
		return fmt.Errorf("%w: it shares server sessions between clients, one transaction at a time (transaction mode), "+
			"and migrations need a session of their own (a session advisory lock serialises them, search_path is set when it starts): %s",
			txinbox.ErrPooler, direct)
	case f.Pooler && f.SearchPath != m.cc.RuntimeParams["search_path"]:
		return fmt.Errorf("%w: it dropped the search_path that migrate sets when a connection starts (search_path is %s, not %s; "+
			"PgBouncer's ignore_startup_parameters): %s", txinbox.ErrPooler, f.SearchPath, m.cc.RuntimeParams["search_path"], direct)
	}
	return nil
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
	if err := m.checkSession(ctx); err != nil {
		return nil, err
	}
	if err := createSchema(ctx, m.db, m.schema); err != nil {
		return nil, err
	}
	rs, err := m.provider.Up(ctx)
	return results(rs, true), err
}

// UpTo creates the schema if it is missing and applies the pending migrations up to version
// (included). It returns the migrations applied, none when the schema was already at or past version.
func (m *Migrator) UpTo(ctx context.Context, version int64) ([]MigrationResult, error) {
	if err := m.checkSession(ctx); err != nil {
		return nil, err
	}
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
	if err := m.checkSession(ctx); err != nil {
		return nil, err
	}
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
	if err := m.checkSession(ctx); err != nil {
		return nil, err
	}
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
// from every process at start-up. Its connections must not go through a pooler in transaction mode:
// it returns an error matching [txinbox.ErrPooler] then (see [Migrator]). It connects with the configuration of store.DB, which must be a
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
