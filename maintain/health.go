package maintain

import (
	"context"
	"time"

	"github.com/txinbox/txinbox/internal/pgstats"
)

// checkHealth reads the tables' dead row versions and the xmin horizon, and logs at Warn what is above
// its threshold (Config.HorizonWarnAge, Config.DeadRowsWarnThreshold): at most one record per
// condition and check. Errors are logged at Debug, never returned.
func (m *Maintainer) checkHealth(ctx context.Context) {
	cfg := &m.cfg
	hz, err := pgstats.ReadHorizon(ctx, m.store.DB)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("txinbox: could not read the xmin horizon", "err", err)
		}
		return
	}
	// holder describes the session holding the oldest snapshot, as log attributes.
	holder := func(prefix string) []any {
		h := hz.Holder
		if h == nil {
			return nil
		}
		attrs := []any{prefix + "pid", h.PID, prefix + "application_name", h.ApplicationName, prefix + "role", h.Role,
			prefix + "backend_type", h.BackendType, prefix + "xmin_age_xids", h.XminAge}
		if h.DetailsHidden {
			return append(attrs, prefix+"details_hidden", true)
		}
		return append(attrs, prefix+"state", h.State, prefix+"xact_start", h.XactStart, prefix+"query_start", h.QueryStart,
			prefix+"age", h.Age.Round(time.Millisecond))
	}
	if cfg.HorizonWarnAge >= 0 {
		if h := hz.Holder; h != nil && !h.DetailsHidden && !h.XactStart.IsZero() && h.Age > cfg.HorizonWarnAge {
			m.log.Warn("txinbox: an old transaction holds back vacuum: no dead row version of any table is reclaimed until it ends (pg_terminate_backend(pid) ends it)",
				append([]any{"threshold", cfg.HorizonWarnAge}, holder("")...)...)
		}
		if hz.PreparedGID != "" && hz.PreparedAge > cfg.HorizonWarnAge {
			m.log.Warn("txinbox: an old prepared transaction holds back vacuum: COMMIT PREPARED or ROLLBACK PREPARED it",
				"threshold", cfg.HorizonWarnAge, "gid", hz.PreparedGID,
				"age", hz.PreparedAge.Round(time.Millisecond), "xmin_age_xids", hz.PreparedXminAge)
		}
	}
	if cfg.DeadRowsWarnThreshold < 0 {
		return
	}
	tables, err := pgstats.ReadTables(ctx, m.store.DB, m.store.Schema)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("txinbox: could not read the tables' statistics", "err", err)
		}
		return
	}
	for _, t := range tables {
		if t.DeadRows <= int64(cfg.DeadRowsWarnThreshold) {
			continue
		}
		attrs := []any{"table", t.Name, "dead_rows", t.DeadRows, "live_rows", t.LiveRows, "threshold", cfg.DeadRowsWarnThreshold,
			"last_autovacuum", logTime(t.LastAutovacuum), "last_vacuum", logTime(t.LastVacuum)}
		m.log.Warn("txinbox: a txinbox table has many dead row versions: autovacuum is behind, or an old transaction holds them (see horizon_*)",
			append(attrs, holder("horizon_")...)...)
	}
}

// logTime is t for a log record, or "never" when it is zero.
func logTime(t time.Time) any {
	if t.IsZero() {
		return "never"
	}
	return t
}
