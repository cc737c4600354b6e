// Package health forwards to package pgstats, which replaces it; it is kept only for package worker's
// health warning until that warning reads pgstats, and is then deleted.
package health

import "github.com/txinbox/txinbox/internal/pgstats"

// Tables, Table, Holder, Horizon, Generation and the Read functions are those of package pgstats.
var (
	Tables         = pgstats.Tables
	ReadTables     = pgstats.ReadTables
	ReadHorizon    = pgstats.ReadHorizon
	ReadGeneration = pgstats.ReadGeneration
)

type (
	Table      = pgstats.Table
	Holder     = pgstats.Holder
	Horizon    = pgstats.Horizon
	Generation = pgstats.Generation
)
