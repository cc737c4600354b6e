package admin_test

import (
	"testing"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// client receives (inbox) and administers (admin) one test's schema.
type client struct {
	*inbox.Client
	*admin.Admin
}

func newClient(t *testing.T) (client, *testdb.DB) {
	t.Helper()
	db := testdb.New(t)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return client{c, a}, db
}
