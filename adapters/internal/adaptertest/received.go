package adaptertest

import (
	"context"
	"fmt"
	"testing"
)

// CheckReceivedOrder fails t unless the inbox of consumer received exactly the keys of want, in that
// order (message ids ascending), naming the first key received out of place.
func CheckReceivedOrder(t testing.TB, db *DB, consumer string, want []string) {
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
