package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewInDatabase is New in a database of its own, created for t and dropped (WITH (FORCE)) when t
// ends. Tests that hold a snapshot (HoldSnapshot) use it: the xmin horizon that a snapshot holds back
// is that of its database, so a snapshot held there keeps no other test's dead rows from vacuum, and no
// other test's transaction is older than it.
func NewInDatabase(t testing.TB) *DB {
	t.Helper()
	server := URL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "txinbox_test_" + hex.EncodeToString(b)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	return newAt(t, withDatabase(t, server, name))
}

// withDatabase returns the connection string u (a URL or key=value pairs) naming database name.
func withDatabase(t testing.TB, u, name string) string {
	t.Helper()
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return u + " dbname=" + name
	}
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Path = "/" + name
	return p.String()
}

// Snapshot is a transaction held open with a snapshot on a connection of its own, as an operator's
// forgotten session would: it holds back the xmin horizon until End or the end of the test.
type Snapshot struct {
	PID             int32  // the backend pid of its connection
	ApplicationName string // its application_name, unique to it

	end func()
}

// End rolls the transaction back and closes its connection, releasing the horizon it held. It may
// be called more than once; the test's cleanup calls it too.
func (s Snapshot) End() { s.end() }

// HoldSnapshot opens a connection to url (a database of its own: see NewInDatabase) with a unique
// application_name, begins a REPEATABLE READ
// transaction and takes its snapshot (SELECT 1), and leaves it open until t ends (then rolls it back
// and closes the connection) or End is called.
func HoldSnapshot(t testing.TB, url string) Snapshot {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := Snapshot{ApplicationName: "txinbox_test_snapshot_" + hex.EncodeToString(b)}
	cfg.RuntimeParams["application_name"] = s.ApplicationName
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.end = sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.Exec(ctx, "ROLLBACK")
		_ = c.Close(ctx)
	})
	t.Cleanup(s.end)
	s.PID = int32(c.PgConn().PID())
	if _, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return s
}
