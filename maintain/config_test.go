package maintain_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Bad configuration is a *txinbox.ConfigError naming the field, from maintain.New and, prefixed with
// Maintenance, from runner.New; nothing touches the database.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	run := func(context.Context) error { return nil }
	for field, cfg := range map[string]maintain.Config{
		"Lease":          {Lease: time.Millisecond},
		"RollupInterval": {RollupInterval: time.Microsecond},
		"Generation":     {Generation: time.Millisecond},
		"Jobs":           {Jobs: []maintain.Job{{Name: "rotate", Interval: time.Second, Run: run}}},
	} {
		_, err := maintain.New(db.Store(), cfg)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: err = %v, want a *txinbox.ConfigError for %s", field, err, field)
		}
		_, err = runner.New(db.Store(), runner.Config{Maintenance: cfg})
		if !errors.As(err, &ce) || ce.Field != "Maintenance."+field {
			t.Errorf("runner.New, %s: err = %v, want a *txinbox.ConfigError for Maintenance.%s", field, err, field)
		}
	}
	for _, j := range []maintain.Job{{Name: "bad name", Interval: time.Second, Run: run}, {Name: "x", Run: run}, {Name: "x", Interval: time.Second}} {
		_, err := maintain.New(db.Store(), maintain.Config{Jobs: []maintain.Job{j}})
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Jobs" {
			t.Errorf("job %+v: err = %v, want a *txinbox.ConfigError for Jobs", j, err)
		}
	}
}

// A schema without the maintainer's tables (migrated before 00010): Start returns an error matching
// txinbox.ErrNotMigrated.
func TestStartNotMigrated(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`DROP TABLE {schema}.inbox_leader`)); err != nil {
		t.Fatal(err)
	}
	m, err := maintain.New(db.Store(), maintain.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); !errors.Is(err, txinbox.ErrNotMigrated) {
		t.Fatalf("Start: %v, want txinbox.ErrNotMigrated", err)
	}
}

// The retention jobs run every minute, or every sixth of the Generation if that is shorter (at least
// every second), so that a generation lasts at most a sixth longer than Generation.
func TestRetentionJobsPeriod(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, c := range []struct{ generation, want time.Duration }{
		{0, time.Minute}, // Store.Retention, 7 days
		{time.Hour, time.Minute},
		{time.Minute, 10 * time.Second},
		{time.Second, time.Second},
	} {
		m, err := maintain.New(db.Store(), maintain.Config{Generation: c.generation})
		if err != nil {
			t.Fatal(err)
		}
		if got := maintain.RetentionEveryOf(m); got != c.want {
			t.Errorf("Generation %v: the retention jobs run every %v, want %v", c.generation, got, c.want)
		}
	}
}
