package admin

import (
	"context"
	"encoding/json"
	"time"

	"github.com/txinbox/txinbox/internal/pgstats"
)

// Health is what PostgreSQL's statistics say about the two things that silently slow a queue in
// PostgreSQL down: dead row versions piling up in the txinbox tables, and an old snapshot holding
// back the xmin horizon, below which vacuum may remove no dead row version of any table.
type Health struct {
	// Tables are the txinbox tables of the Store's schema that exist (idempotency_keys, inbox,
	// inbox_dead, inbox_queue, inbox_rollup, and the outbox's outbox and outbox_queue; fewer in a
	// schema migrated to an older version), in name order.
	Tables []TableHealth `json:"tables"`
	// Horizon is what holds back the xmin horizon of the whole cluster.
	Horizon Horizon `json:"horizon"`
	// Generation is the inbox's current generation (migration 00006): the schema's maintainer
	// (package maintain) begins a new one every Generation of its Config, so a generation
	// much older than that means no maintainer runs (or its rotations fail: see its log). Nil in a
	// schema migrated to an older version.
	Generation *Generation `json:"generation,omitempty"`
}

// Generation is the inbox's current generation.
type Generation struct {
	Number  int64     `json:"number"`   // generations begun since migration 00006 (0 before the first rotation)
	BeganAt time.Time `json:"began_at"` // when it began (the migration, or the rotation that began it)
}

// TableHealth is PostgreSQL's cumulative statistics of one table (pg_stat_all_tables): estimates,
// updated by vacuum and analyze and by the sessions' own counts (reported at their transactions'
// end, at most every second or so), reset by pg_stat_reset and lost by a crash of the server.
type TableHealth struct {
	// Table is the table's name (without the schema).
	Table string `json:"table"`
	// LiveRows is the estimated number of live rows (n_live_tup).
	LiveRows int64 `json:"live_rows"`
	// DeadRows is the estimated number of dead row versions (n_dead_tup): rows deleted or updated
	// whose space vacuum has not reclaimed yet. They stay while a snapshot older than them is open
	// (see Horizon), however often vacuum runs.
	DeadRows int64 `json:"dead_rows"`
	// Updates counts the rows updated and HOTUpdates those of them updated in place (heap-only
	// tuples: no index entry written), since the statistics began.
	Updates    int64 `json:"updates"`
	HOTUpdates int64 `json:"hot_updates"`
	// Deletes counts the rows deleted since the statistics began (n_tup_del; a TRUNCATE of a
	// retired generation deletes no row).
	Deletes int64 `json:"deletes"`
	// LastVacuum and LastAutovacuum are when a manual VACUUM (the worker pool's safety net for
	// inbox_queue is one) and autovacuum last vacuumed the table; zero (omitted in JSON) if never since
	// the statistics began.
	LastVacuum     time.Time `json:"last_vacuum,omitzero"`
	LastAutovacuum time.Time `json:"last_autovacuum,omitzero"`
	// Vacuums and Autovacuums count the vacuums of each kind since the statistics began.
	Vacuums     int64 `json:"vacuums"`
	Autovacuums int64 `json:"autovacuums"`
	// Bytes is the size of the table with its indexes and TOAST (pg_total_relation_size).
	Bytes int64 `json:"bytes"`
}

// DeadShare is the share of dead row versions among all the row versions of the table,
// DeadRows / (LiveRows + DeadRows), between 0 and 1 (0 when both are 0). Both are estimates, updated
// at different times (live rows are re-estimated by ANALYZE, and after many deletes the estimate of
// live rows may be far below the dead ones): DeadRows / LiveRows could be any size, this share never
// exceeds 1.
func (t TableHealth) DeadShare() float64 {
	live, dead := max(t.LiveRows, 0), max(t.DeadRows, 0)
	if live+dead == 0 {
		return 0
	}
	return float64(dead) / float64(live+dead)
}

// Horizon is what holds back the xmin horizon: the oldest transaction id whose effects some snapshot
// may still need. Vacuum keeps every row version deleted after it, in every table of the database. Ages in transactions are
// PostgreSQL's age(xid): the number of transaction ids assigned since.
type Horizon struct {
	// Holder is the session, other than the one reading, holding the oldest snapshot
	// (pg_stat_activity.backend_xmin) among those that hold back the cleanup of this database's
	// tables: sessions connected to it, or to no database (a walsender relaying a standby's
	// hot_standby_feedback). Sessions of other databases of the cluster do not. Nil when none holds one.
	Holder *XminHolder `json:"holder"`
	// SlotName is the replication slot whose xmin or catalog_xmin (which holds back the cleanup of the
	// system catalogs only) is oldest, and SlotXminAge its age in transactions; "" and 0 when no slot
	// holds one. An inactive slot holds the horizon forever.
	SlotName    string `json:"slot_name"`
	SlotXminAge int64  `json:"slot_xmin_age_xids"`
	// PreparedGID is the oldest prepared transaction of this database (PREPARE TRANSACTION, not yet
	// committed or rolled back), PreparedXminAge its age in transactions and PreparedAge the time since it was prepared;
	// "", 0 and 0 when there is none. A forgotten prepared transaction holds the horizon forever.
	// PreparedAge is prepared_age_seconds in JSON (seconds, fractional).
	PreparedGID     string        `json:"prepared_gid"`
	PreparedXminAge int64         `json:"prepared_xmin_age_xids"`
	PreparedAge     time.Duration `json:"-"`
	// FrozenXidAge is the age of the database's datfrozenxid in transactions: how close it is to
	// transaction id wraparound (autovacuum forces freezing at autovacuum_freeze_max_age, 200 million by
	// default), which a held horizon keeps vacuum from preventing.
	FrozenXidAge int64 `json:"frozen_xid_age_xids"`
}

// XminHolder is a session holding a snapshot, from pg_stat_activity.
//
// PostgreSQL shows the state, times and query of another role's session only to superusers, members
// of pg_read_all_stats and members of that role. Otherwise DetailsHidden is true, State is "" and
// XactStart, QueryStart and Age are zero; PID, Role, ApplicationName, BackendType and XminAge are shown
// to every role. Grant pg_read_all_stats to the role reading (GRANT pg_read_all_stats TO ...) to see
// them all.
type XminHolder struct {
	// PID is the session's backend process id (pg_terminate_backend(pid) ends it).
	PID int32 `json:"pid"`
	// Role is the session's role (usename); ApplicationName its application_name; BackendType its
	// kind ("client backend", "autovacuum worker", "walsender", ...).
	Role            string `json:"role"`
	ApplicationName string `json:"application_name"`
	BackendType     string `json:"backend_type"`
	// State is the session's state: "active", "idle in transaction", ...
	State string `json:"state"`
	// XactStart is when its transaction began, QueryStart when its current (or last) statement began;
	// zero (omitted in JSON) when hidden or outside a transaction (a walsender relaying a standby's
	// hot_standby_feedback has an xmin but no transaction).
	XactStart  time.Time `json:"xact_start,omitzero"`
	QueryStart time.Time `json:"query_start,omitzero"`
	// XminAge is the age of its snapshot's xmin in transactions.
	XminAge int64 `json:"xmin_age_xids"`
	// Age is how long its transaction has been open (now − XactStart): the snapshot is at most that
	// old. Zero when XactStart is. Its JSON form is age_seconds (seconds, fractional).
	Age time.Duration `json:"-"`
	// DetailsHidden is true when PostgreSQL hid the session's details from the reading role (see
	// XminHolder).
	DetailsHidden bool `json:"details_hidden"`
}

type xminHolderFields XminHolder // without the methods

type xminHolderJSON struct {
	xminHolderFields
	AgeSeconds float64 `json:"age_seconds"`
}

// MarshalJSON encodes h with Age as age_seconds (seconds, fractional).
func (h XminHolder) MarshalJSON() ([]byte, error) {
	return json.Marshal(xminHolderJSON{xminHolderFields(h), h.Age.Seconds()})
}

// UnmarshalJSON decodes the form MarshalJSON writes.
func (h *XminHolder) UnmarshalJSON(b []byte) error {
	var v xminHolderJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*h = XminHolder(v.xminHolderFields)
	h.Age = time.Duration(v.AgeSeconds * float64(time.Second))
	return nil
}

type horizonFields Horizon // without the methods

type horizonJSON struct {
	horizonFields
	PreparedAgeSeconds float64 `json:"prepared_age_seconds"`
}

// MarshalJSON encodes h with PreparedAge as prepared_age_seconds (seconds, fractional).
func (h Horizon) MarshalJSON() ([]byte, error) {
	return json.Marshal(horizonJSON{horizonFields(h), h.PreparedAge.Seconds()})
}

// UnmarshalJSON decodes the form MarshalJSON writes.
func (h *Horizon) UnmarshalJSON(b []byte) error {
	var v horizonJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*h = Horizon(v.horizonFields)
	h.PreparedAge = time.Duration(v.PreparedAgeSeconds * float64(time.Second))
	return nil
}

// Health reads the statistics of the txinbox tables of the Store's schema and what holds back the
// xmin horizon, leaving out the session it runs on. It runs three statements on statistics views
// (no table of the schema is read: its cost does not grow with them), each on a connection of the
// Store's DB, so it may be called at any rate a dashboard needs. The figures are estimates (see
// TableHealth). A role without pg_read_all_stats sees fewer details of other roles' sessions (see
// XminHolder); nothing fails because of it.
func (a *Admin) Health(ctx context.Context) (Health, error) {
	tables, err := pgstats.ReadTables(ctx, a.store.DB, a.store.Schema)
	if err != nil {
		return Health{}, err
	}
	hz, err := pgstats.ReadHorizon(ctx, a.store.DB)
	if err != nil {
		return Health{}, err
	}
	out := Health{Tables: make([]TableHealth, len(tables)), Horizon: Horizon{
		SlotName: hz.SlotName, SlotXminAge: hz.SlotXminAge, PreparedGID: hz.PreparedGID,
		PreparedXminAge: hz.PreparedXminAge, PreparedAge: hz.PreparedAge, FrozenXidAge: hz.FrozenXidAge,
	}}
	gen, err := pgstats.ReadGeneration(ctx, a.store.DB, a.store.Schema)
	if err != nil {
		return Health{}, err
	}
	if gen != nil {
		out.Generation = &Generation{Number: gen.Number, BeganAt: gen.BeganAt}
	}
	for i, t := range tables {
		out.Tables[i] = TableHealth{
			Table: t.Name, LiveRows: t.LiveRows, DeadRows: t.DeadRows, Updates: t.Updates, HOTUpdates: t.HOTUpdates, Deletes: t.Deletes,
			LastVacuum: t.LastVacuum, LastAutovacuum: t.LastAutovacuum, Vacuums: t.Vacuums,
			Autovacuums: t.Autovacuums, Bytes: t.Bytes,
		}
	}
	if h := hz.Holder; h != nil {
		out.Horizon.Holder = &XminHolder{
			PID: h.PID, Role: h.Role, ApplicationName: h.ApplicationName, BackendType: h.BackendType,
			State: h.State, XactStart: h.XactStart, QueryStart: h.QueryStart, XminAge: h.XminAge, Age: h.Age,
			DetailsHidden: h.DetailsHidden,
		}
	}
	return out, nil
}
