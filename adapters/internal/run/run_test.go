package run

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txinbox/txinbox/adapters"
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

// TestLoopStopWaits calls Stop while the body is finishing a batch: Stop returns nil only after the
// body returned, and the batch's write context (abort) was never ended.
func TestLoopStopWaits(t *testing.T) {
	t.Parallel()
	l := Loop{Name: "test"}
	inHand, finished := make(chan struct{}), make(chan struct{})
	var aborted bool
	if err := l.Start(context.Background(), func(context.Context) (Body, error) {
		return func(ctx, abort context.Context) error {
			close(inHand)
			<-ctx.Done()
			aborted = abort.Err() != nil
			close(finished)
			return nil
		}, nil
	}); err != nil {
		t.Fatal(err)
	}
	<-inHand
	if err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-finished:
	default:
		t.Fatal("Stop returned before the body did")
	}
	if aborted {
		t.Error("the batch was aborted by a Stop without deadline")
	}
	<-l.Done()
	if err := l.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestLoopStopDeadline gives Stop a context that is already done while the body is blocked on its
// batch: Stop returns an error wrapping the context's error, and the batch's write context is ended.
func TestLoopStopDeadline(t *testing.T) {
	t.Parallel()
	l := Loop{Name: "test"}
	release := make(chan struct{})
	abortSeen := make(chan struct{})
	if err := l.Start(context.Background(), func(context.Context) (Body, error) {
		return func(ctx, abort context.Context) error {
			<-abort.Done()
			close(abortSeen)
			<-release
			return nil
		}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop: %v, want context.Canceled", err)
	}
	<-abortSeen
	close(release)
	<-l.Done()
}

// TestLoopStartContextEnds ends Start's context: both the consuming and the write contexts end, as
// with Stop on an ended context.
func TestLoopStartContextEnds(t *testing.T) {
	t.Parallel()
	l := Loop{Name: "test"}
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx, func(context.Context) (Body, error) {
		return func(ctx, abort context.Context) error {
			<-ctx.Done()
			<-abort.Done()
			return nil
		}, nil
	}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-l.Done()
	if err := l.Stop(context.Background()); err != nil {
		t.Errorf("Stop after Start's context ended: %v", err)
	}
}

// TestLoopStartErrors checks that a failed open starts nothing and may be retried, that a second
// Start is refused with adapters.ErrAlreadyStarted, that Stop before Start returns nil, and that the
// error a body ends with is what Stop returns.
func TestLoopStartErrors(t *testing.T) {
	t.Parallel()
	l := Loop{Name: "test"}
	if err := l.Stop(context.Background()); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
	errOpen, errBody := errors.New("open failed"), errors.New("broker gone")
	if err := l.Start(context.Background(), func(context.Context) (Body, error) { return nil, errOpen }); !errors.Is(err, errOpen) {
		t.Fatalf("Start: %v, want %v", err, errOpen)
	}
	body := func(context.Context) (Body, error) {
		return func(context.Context, context.Context) error { return errBody }, nil
	}
	if err := l.Start(context.Background(), body); err != nil {
		t.Fatalf("Start after a failed open: %v", err)
	}
	if err := l.Start(context.Background(), body); !errors.Is(err, adapters.ErrAlreadyStarted) {
		t.Errorf("second Start: %v, want ErrAlreadyStarted", err)
	}
	<-l.Done()
	if err := l.Stop(context.Background()); !errors.Is(err, errBody) {
		t.Errorf("Stop: %v, want %v", err, errBody)
	}
}

// TestHold checks that Hold waits the whole delay, keeping the held batch alive from the start, and
// that an ended ctx ends the wait.
func TestHold(t *testing.T) {
	t.Parallel()
	var kept int
	t0 := time.Now()
	if !Hold(context.Background(), 50*time.Millisecond, func() { kept++ }, 10*time.Millisecond) {
		t.Fatal("Hold reported an ended ctx")
	}
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Errorf("Hold returned after %v, before the wait of 50ms ended", d)
	}
	if kept < 1 {
		t.Error("keep never ran")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	kept = 0
	if Hold(ctx, time.Hour, func() { kept++ }, time.Minute) {
		t.Error("Hold on an ended ctx reported it alive")
	}
	if kept != 1 {
		t.Errorf("keep ran %d times, want once, at the start", kept)
	}
	if Hold(ctx, time.Hour, nil, 0) {
		t.Error("Hold without keep on an ended ctx reported it alive")
	}
}
