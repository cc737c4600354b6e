// Package health forwards to package pgstats, which replaces it; it is kept only for package worker's
// health warning until that warning reads pgstats, and is then deleted.
package health

import "github.com/txinbox/txinbox/internal/pgstats"

// Tables and the Read functions are those of package pgstats.
var (
	Tables         = pgstats.Tables
	ReadTables     = pgstats.ReadTables
	ReadHorizon    = pgstats.ReadHorizon
	ReadGeneration = pgstats.ReadGeneration
)

// Table is pgstats.Table.
type Table = pgstats.Table

// Holder is pgstats.Holder.
type Holder = pgstats.Holder

// Horizon is pgstats.Horizon.
type Horizon = pgstats.Horizon

// Generation is pgstats.Generation.
type Generation = pgstats.Generation
