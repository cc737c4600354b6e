package ledger

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// VersionTable is the goose version table of the ledger's own migrations, kept apart from txinbox's
// (migrate.VersionTable) in the same schema.
const VersionTable = "ledger_db_version"

// Migrate brings schema up to date: txinbox's tables (migrate.Up) and then the ledger's own
// (accounts, ledger_entries). It creates the schema if needed and is safe to run from several
// processes at once (goose takes a session advisory lock).
func Migrate(ctx context.Context, connConfig *pgx.ConnConfig, schema string) error {
	m, err := migrate.New(ctx, connConfig, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		return fmt.Errorf("ledger: txinbox migrations: %w", err)
	}
	_, err = m.Up(ctx)
	_ = m.Close()
	if err != nil {
		return fmt.Errorf("ledger: txinbox migrations: %w", err)
	}
	if err := distribute(ctx, connConfig, schema); err != nil {
		return err
	}
	cfg := connConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	db.SetMaxOpenConns(2)
	h := fnv.New64a()
	h.Write([]byte("ledger.migrate:" + schema))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64() >> 1)))
	if err != nil {
		return err
	}
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithSessionLocker(locker), goose.WithTableName(VersionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("ledger: migrations: %w", err)
	}
	return nil
}

// distribute distributes txinbox's tables by consumer when the database is a Citus coordinator
// (migrate.Distribute; SCALING.md); elsewhere it changes nothing. The ledger's own tables stay
// tables of the coordinator: a handler's writes to them commit with the inbox's rows on the shards.
func distribute(ctx context.Context, connConfig *pgx.ConnConfig, schema string) error {
	c, err := pgx.ConnectConfig(ctx, connConfig)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer func() { _ = c.Close(ctx) }()
	err = migrate.Distribute(ctx, txinbox.Store{DB: c, Schema: schema})
	if err != nil && !errors.Is(err, migrate.ErrNoCitus) {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// DropSchema drops schema with everything in it, if it exists. The demo calls it on its own schema
// only, before migrating it again (see demo.Options.Reset).
func DropSchema(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, schema string) error {
	if err := txinbox.ValidateSchema(schema); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("ledger: drop schema %s: %w", schema, err)
	}
	return nil
}
