package seen

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
)

func lruPut(t *testing.T, c *LRU, epoch uint64, key string, ttl time.Duration) {
	t.Helper()
	if err := c.Put(context.Background(), epoch, []txinbox.SeenKey{{Schema: "s", Consumer: "c", Key: key}}, []txinbox.SeenEntry{{ID: 1}}, []time.Duration{ttl}); err != nil {
		t.Fatal(err)
	}
}

func lruHas(t *testing.T, c *LRU, key string) bool {
	t.Helper()
	_, found, _, err := c.Get(context.Background(), []txinbox.SeenKey{{Schema: "s", Consumer: "c", Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	return found[0]
}

// TestLRUCacheBounds: entries are dropped least recently used first beyond MaxEntries or MaxBytes,
// expire at their own TTL, and an Invalidate drops both the entries and later Puts of the old epoch.
func TestLRUCacheBounds(t *testing.T) {
	t.Parallel()
	c, err := NewLRU(LRUConfig{MaxEntries: 3, MaxBytes: 3 * (lruEntryOverhead + 5)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	for _, k := range []string{"a", "b", "c"} {
		lruPut(t, c, 0, k, time.Minute)
	}
	lruHas(t, c, "a") // a is now the most recently used
	lruPut(t, c, 0, "d", time.Minute)
	if lruHas(t, c, "b") || !lruHas(t, c, "a") || c.Len() != 3 {
		t.Fatalf("entries bound: b kept or a dropped (%d entries)", c.Len())
	}
	// A long key takes the room of two short ones.
	lruPut(t, c, 0, strings.Repeat("x", lruEntryOverhead), time.Minute)
	if c.bytesHeld() > 3*(lruEntryOverhead+5) || c.Len() != 2 {
		t.Fatalf("bytes bound: %d bytes in %d entries", c.bytesHeld(), c.Len())
	}
	lruPut(t, c, 0, "short", time.Second)
	now = now.Add(time.Second)
	if lruHas(t, c, "short") {
		t.Fatal("an entry outlived its TTL")
	}
	if err := c.Invalidate(context.Background()); err != nil || c.Len() != 0 || c.bytesHeld() != 0 {
		t.Fatalf("after Invalidate: %d entries, %d bytes, %v", c.Len(), c.bytesHeld(), err)
	}
	lruPut(t, c, 0, "late", time.Minute) // made in the old epoch
	if lruHas(t, c, "late") {
		t.Fatal("a Put of an old epoch is returned")
	}
	_, _, epoch, _ := c.Get(context.Background(), nil)
	lruPut(t, c, epoch, "late", time.Minute)
	if !lruHas(t, c, "late") {
		t.Fatal("a Put of the current epoch is not returned")
	}
}
