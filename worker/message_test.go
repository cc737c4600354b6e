package worker_test

import (
	"testing"

	"github.com/txinbox/txinbox/worker"
)

// A test can call a handler with a Message built by hand: SetResult keeps the result in the Message
// (instead of dereferencing the pool's missing result slot) and Result returns it.
func TestMessageBuiltByHandKeepsItsResult(t *testing.T) {
	m := &worker.Message[int]{Key: "k", Payload: 1}
	if got := m.Result(); got != nil {
		t.Fatalf("Result before SetResult = %q, want nil", got)
	}
	if err := m.SetResult(map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetResult(map[string]int{"n": 2}); err != nil {
		t.Fatal(err)
	}
	if got := string(m.Result()); got != `{"n":2}` {
		t.Fatalf("Result = %s, want the last SetResult, {\"n\":2}", got)
	}
	if err := m.SetResult(func() {}); err == nil {
		t.Fatal("SetResult of a func: nil error, want the JSON encoding error")
	}
}
