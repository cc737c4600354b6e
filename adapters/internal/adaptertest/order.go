package adaptertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
)

// StoreFailureKeepsOrder is the check every broker adapter's tests run (a test of the adapters module
// fails for an adapter package that has none): a batch that cannot be stored is held and stored again
// before any later message, so the inbox receives the messages in the order the broker delivers
// them (the order a worker.Pool runs the messages of an ordering key in). It publishes 60 messages,
// starts a consumer with batches of 10 (so that later messages wait prefetched behind the first
// batch) while every connection to the database is refused, lets at least three stores fail, gives
// the database back, and checks that the inbox holds each message once, received in publishing order
// (message ids ascending with it), and that the consumer acknowledged each once.
func StoreFailureKeepsOrder(t *testing.T, db *testdb.DB, h Harness) {
	t.Helper()
	ctx := context.Background()
	unique, _ := Plan("order", 60, 0)
	h.Publish(unique)
	sw := NewSwitchDB(DeadPool(t))
	c := h.Start(adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "ledger"}, 10)
	WaitFor(t, "failed stores", func() bool { return c.Stats().Failures >= 3 })
	sw.Set(db.Pool)
	WaitFor(t, "every message acknowledged once the database is back", func() bool { return c.Stats().Acked >= int64(len(unique)) })
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Acked != int64(len(unique)) || st.Inserted != int64(len(unique)) {
		t.Errorf("stats %+v: want %d inserted and acknowledged", st, len(unique))
	}
	CheckUnique(t, db, "ledger", unique)
	want := make([]string, len(unique))
	for i, m := range unique {
		want[i] = m.Key
	}
	CheckReceivedOrder(t, db, "ledger", want)
}

// CheckReceivedOrder fails t unless the inbox of consumer received exactly the keys of want, in that
// order (message ids ascending), naming the first key received out of place.
func CheckReceivedOrder(t testing.TB, db *testdb.DB, consumer string, want []string) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.SQL(`SELECT key FROM {schema}.inbox WHERE consumer = $1 ORDER BY id`), consumer)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("the inbox received %s at position %d, where %s was published (received %s; published %s)",
				got[i], i, want[i], window(got, i), window(want, i))
			return
		}
	}
	if len(got) != len(want) {
		t.Errorf("the inbox received %d messages, want %d", len(got), len(want))
	}
}

// window returns the few keys of ks around position i, for a failure message.
func window(ks []string, i int) string {
	lo, hi := max(i-2, 0), min(i+3, len(ks))
	return fmt.Sprintf("…%v…", ks[lo:hi])
}
