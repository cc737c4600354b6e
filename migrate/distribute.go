package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
)

// ErrNoCitus is returned by [Distribute] when the database has no citus extension.
var ErrNoCitus = errors.New("txinbox: the citus extension is not installed in this database")

// DistributedTables are the tables [Distribute] distributes by consumer, colocated with the first:
// every table that holds messages or per-consumer records (inbox's partitions follow inbox),
// inbox_rollup_batch (migration 00010), which a batch's finish writes on its consumer's shard, and
// inbox_paused (migration 00014: the paused consumers), which every claim of a consumer reads, so
// that the claim stays on its consumer's shard (as a table of the coordinator it would make every
// claim a query across nodes; as a reference table every pause a write on every node).
//
// The others stay tables of the coordinator: the version table, the idempotency keys of package
// idempotency, inbox_ring (migration 00006: the current generation, one row, read by its own
// statements only; as a reference table its row locks took distributed locks that deadlocked under
// concurrent registrations), the maintainer's inbox_leader and inbox_maintenance and the pools'
// inbox_pools (migration 00010: read and written by statements of their own), and the outbox's
// tables, outbox_paused included. The outbox has no consumer column, and a relay claims across
// topics and keys in one statement with FOR UPDATE SKIP LOCKED, which Citus runs only on one shard.
// As single-shard distributed tables (Citus 13.2) the outbox's tables failed the outbox's own
// tests: a claim took the next event of a key whose previous event's record had not committed, and
// a rotation's lock waited for every publishing transaction. On the coordinator they pass them all
// (the Citus acceptance run, SCALING.md).
var DistributedTables = []string{"inbox", "inbox_queue", "inbox_dead", "inbox_rollup", "inbox_gen", "inbox_rollup_batch", "inbox_batch", "inbox_paused"}

// Distribute makes the txinbox tables of store's schema (DistributedTables) distributed tables of a
// Citus cluster, by the column consumer and colocated, so that every statement txinbox runs on them
// goes to the one shard holding its consumer (SCALING.md). Run it after [Up] (again after an Up that added a table to the
// list), connected to the coordinator; rows already stored are moved to the shards. Tables already
// distributed are left alone, so it is safe to call at every start. It runs in one transaction on
// store.DB, which must not be inside a transaction of the caller.
//
// The dead-letter set (inbox_dead) is kept by triggers on inbox (migration 00003). Citus accepts
// them only with citus.enable_unsafe_triggers on: Distribute sets it for its own transaction. The
// triggers fire on each shard and write the colocated shard of inbox_dead, on the same node. A
// later migration that creates or drops a trigger (a down migration of 00003, say) needs the same
// setting: pass options=-c citus.enable_unsafe_triggers=on in the connection string.
//
// Without the citus extension it returns an error matching [ErrNoCitus] and changes nothing.
func Distribute(ctx context.Context, store txinbox.Store) error {
	store, err := store.Resolve()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, store.DB, func(tx pgx.Tx) error {
		var citus bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&citus); err != nil {
			return fmt.Errorf("txinbox: distribute: %w", err)
		}
		if !citus {
			return ErrNoCitus
		}
		if _, err := tx.Exec(ctx, "SET LOCAL citus.enable_unsafe_triggers = on"); err != nil {
			return fmt.Errorf("txinbox: distribute: %w", err)
		}
		first := pgx.Identifier{store.Schema, DistributedTables[0]}.Sanitize()
		for _, table := range DistributedTables {
			name := pgx.Identifier{store.Schema, table}.Sanitize()
			var exists, done bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
				EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass($1))`, name).Scan(&exists, &done); err != nil {
				return fmt.Errorf("txinbox: distribute %s: %w", name, err)
			}
			if !exists || done {
				continue // not there at the schema's version (a later migration creates it), or done
			}
			colocate := first
			if table == DistributedTables[0] {
				colocate = "default"
			}
			if _, err := tx.Exec(ctx, "SELECT create_distributed_table($1::regclass, 'consumer', colocate_with => $2)", name, colocate); err != nil {
				return fmt.Errorf("txinbox: distribute %s: %w", name, err)
			}
		}
		return nil
	})
}
