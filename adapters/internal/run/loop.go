package run

import (
	"context"
	"fmt"
	"sync"

	"github.com/txinbox/txinbox/adapters"
)

// Body is a consumer's loop. It consumes until ctx ends (Stop was called, or Start's context ended)
// and then returns nil after finishing the batch in hand, or returns the error that made consuming
// impossible. The contexts of its writes and acknowledgements derive from abort, which ends when the
// batch in hand must be given up: Stop's context ended before Body returned, or Start's context ended.
type Body func(ctx, abort context.Context) error

// Loop is the Start/Stop plumbing shared by the consumers: Start opens (synchronously) and runs Body
// in a goroutine, Stop ends it and waits. Its zero value is ready; Name prefixes its errors.
type Loop struct {
	Name string

	mu            sync.Mutex
	started       bool
	cancel, abort context.CancelFunc
	stopping      <-chan struct{}
	done          chan struct{}
	err           error // Body's result, written before done is closed
}

// Start calls open with ctx, and runs the Body it returns in a goroutine. If open fails, Start returns
// its error (prefixed with Name), nothing runs, and Start may be called again. A second Start after a
// successful one returns an error matching adapters.ErrAlreadyStarted. When ctx ends, the loop stops
// as with Stop on an ended context: the batch in hand is abandoned.
func (l *Loop) Start(ctx context.Context, open func(ctx context.Context) (Body, error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return fmt.Errorf("%s: %w", l.Name, adapters.ErrAlreadyStarted)
	}
	body, err := open(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", l.Name, err)
	}
	l.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	abortCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.abort, l.stopping = cancel, abort, runCtx.Done()
	done := l.doneLocked()
	unwatch := context.AfterFunc(ctx, func() { abort(); cancel() })
	go func() {
		err := body(runCtx, abortCtx)
		unwatch()
		cancel()
		abort()
		l.err = err
		close(done)
	}()
	return nil
}

// Stop ends consuming and waits until the loop returned or ctx ends. It returns nil when the loop
// finished the batch in hand and stopped, the error that had ended the loop before (consuming became
// impossible), or, when ctx ended first, an error wrapping ctx.Err(): the batch in hand is then
// abandoned (not acknowledged, so the broker delivers it again) and the loop ends in the background.
// Stop before Start returns nil.
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	started, cancel, abort, done := l.started, l.cancel, l.abort, l.doneLocked()
	l.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	select {
	case <-done:
		return l.err
	default:
	}
	select {
	case <-done:
		return l.err
	case <-ctx.Done():
		abort()
		return fmt.Errorf("%s: stopped before the batch in hand was finished; it is abandoned, not acknowledged, and delivered again: %w",
			l.Name, ctx.Err())
	}
}

// Stopping returns a channel closed once consuming was asked to end (Stop was called, or Start's
// context ended), or nil before Start. Tests use it to stop a consumer while a batch is in hand.
func (l *Loop) Stopping() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopping
}

// Done returns a channel closed when the loop has returned: after Stop, after Start's context ended,
// or when consuming became impossible (Stop then returns why).
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.doneLocked()
}

func (l *Loop) doneLocked() chan struct{} {
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}
