package retention_test

import (
	"testing"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
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
