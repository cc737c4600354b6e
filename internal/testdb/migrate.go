package testdb

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
)

// migrateSchema applies txinbox's migrations to schema, connecting with connConfig.
func migrateSchema(ctx context.Context, connConfig *pgx.ConnConfig, schema string) error {
	m, err := migrate.New(ctx, connConfig, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}

// Store returns the txinbox.Store of the test's schema, on its pool.
func (d *DB) Store() txinbox.Store { return txinbox.Store{DB: d.Pool, Schema: d.Schema} }
