package run

import (
	"context"
	"testing"
	"time"
)

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   any
		want string
		ok   bool
	}{
		{"s", "s", true}, {[]byte("b"), "b", true}, {[]byte{0xff}, "", false}, {int32(7), "7", true},
		{true, "true", true}, {1.5, "1.5", true}, {nil, "", false},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "2026-01-02T03:04:05Z", true},
		{map[string]any{"a": 1}, `{"a":1}`, true},
	} {
		got, ok := Text(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Text(%#v) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Second, Max: 3 * time.Second}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if got := b.Next(); got != want {
			t.Errorf("Next #%d = %v, want %v", i, got, want)
		}
	}
	b.Reset()
	if got := b.Next(); got != time.Second {
		t.Errorf("after Reset: %v", got)
	}
}

// TestWriteContext checks that the write context outlives its parent, and ends once the shutdown
// allowance after the parent's end has passed.
func TestWriteContext(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithCancel(context.Background())
	w, done := WriteContext(parent, time.Hour, 10*time.Millisecond)
	defer done()
	cancel()
	if w.Err() != nil {
		t.Fatal("write context ended with its parent")
	}
	<-w.Done() // ends after the shutdown allowance
}
