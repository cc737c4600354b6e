package retention_test

import (
	"testing"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
	"github.com/txinbox/txinbox/retention"
)

func newClient(t *testing.T) (*inbox.Client, *testdb.DB) {
	t.Helper()
	db := testdb.New(t)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c, db
}

// newCleaner returns a Cleaner of db's schema.
func newCleaner(t testing.TB, db *testdb.DB, cfg retention.Config) *retention.Cleaner {
	t.Helper()
	cl, err := retention.New(db.Store(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// cleanerOf returns a Cleaner of c's store, for a one-shot Clean.
func cleanerOf(t testing.TB, c *inbox.Client) *retention.Cleaner {
	t.Helper()
	cl, err := retention.New(c.Store(), retention.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
