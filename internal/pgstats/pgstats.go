// Package pgstats reads what keeps the txinbox tables clean (queries/health.sql): PostgreSQL's
// statistics of the tables and what holds back the xmin horizon. It is shared by admin.Health (whose
// public types mirror these; the console renders admin.Health), package metrics' gauges and the
// maintainer's health warnings. Its import path names neither "health" nor "vacuum", so that package
// worker's dependencies name no such package.
package pgstats

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// Tables are the txinbox tables of a schema (migrations/), in name order.
var Tables = []string{"idempotency_keys", "inbox", "inbox_dead", "inbox_queue", "inbox_rollup", "outbox", "outbox_queue"}

// Table is the statistics of one table (see admin.TableHealth).
type Table struct {
	Name           string
	LiveRows       int64
	DeadRows       int64
	Updates        int64
	HOTUpdates     int64
	Deletes        int64
	LastVacuum     time.Time
	LastAutovacuum time.Time
	Vacuums        int64
	Autovacuums    int64
	Bytes          int64
}

// Holder is the session holding the oldest snapshot (see admin.XminHolder).
type Holder struct {
	PID             int32
	Role            string
	ApplicationName string
	BackendType     string
	State           string
	XactStart       time.Time
	QueryStart      time.Time
	XminAge         int64
	Age             time.Duration
	DetailsHidden   bool
}

// Horizon is what holds back the xmin horizon (see admin.Horizon).
type Horizon struct {
	Holder          *Holder
	SlotName        string
	SlotXminAge     int64
	PreparedGID     string
	PreparedXminAge int64
	PreparedAge     time.Duration
	FrozenXidAge    int64
}

// ReadTables returns the statistics of the txinbox tables of schema that exist, in name order.
func ReadTables(ctx context.Context, db sqlc.DBTX, schema string) ([]Table, error) {
	rows, err := schemasql.Queries.TableHealth(ctx, db, schema, Tables)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	out := make([]Table, len(rows))
	for i, r := range rows {
		out[i] = Table{
			Name: r.TableName, LiveRows: r.LiveRows, DeadRows: r.DeadRows, Updates: r.Updates,
			HOTUpdates: r.HotUpdates, Deletes: r.Deletes, LastVacuum: ts(r.LastVacuum), LastAutovacuum: ts(r.LastAutovacuum),
			Vacuums: r.Vacuums, Autovacuums: r.Autovacuums, Bytes: r.TotalBytes,
		}
	}
	return out, nil
}

// ReadHorizon returns what holds back the xmin horizon, as seen by the session running it (which it
// leaves out).
func ReadHorizon(ctx context.Context, db sqlc.DBTX) (Horizon, error) {
	var h Horizon
	holders, err := schemasql.Queries.XminHolder(ctx, db)
	if err != nil {
		return h, schemasql.Err(err)
	}
	if len(holders) > 0 {
		r := holders[0]
		h.Holder = &Holder{
			PID: r.Pid, Role: r.RoleName, ApplicationName: r.ApplicationName, BackendType: r.BackendType,
			State: r.State, XactStart: ts(r.XactStart), QueryStart: ts(r.QueryStart), XminAge: r.XminAge,
			Age: seconds(r.XactAgeSeconds), DetailsHidden: !r.DetailsVisible,
		}
	}
	o, err := schemasql.Queries.XminRetainers(ctx, db)
	if err != nil {
		return h, schemasql.Err(err)
	}
	h.SlotName, h.SlotXminAge = o.SlotName, o.SlotXminAge
	h.PreparedGID, h.PreparedXminAge, h.PreparedAge = o.PreparedGid, o.PreparedXminAge, seconds(o.PreparedAgeSeconds)
	h.FrozenXidAge = o.FrozenXidAge
	return h, nil
}

// Generation is the inbox's current generation (see admin.Generation).
type Generation struct {
	Number  int64
	BeganAt time.Time
}

// ReadGeneration returns the current generation of schema's inbox (migration 00006), or nil when the
// schema has no inbox_ring (it predates 00006).
func ReadGeneration(ctx context.Context, db sqlc.DBTX, schema string) (*Generation, error) {
	row, err := schemasql.Queries.CurrentGeneration(ctx, schemasql.New(schema).Wrap(db))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return nil, nil
	}
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return &Generation{Number: row.Gen, BeganAt: ts(row.RotatedAt)}, nil
}

func ts(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

// seconds converts PostgreSQL's fractional seconds; a negative value (clock skew between now() and
// a start time) is 0.
func seconds(s float64) time.Duration { return time.Duration(max(s, 0) * float64(time.Second)) }
