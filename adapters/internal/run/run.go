// Package run holds what the broker consumers share: the checks and defaults of their Config (Setup),
// their Start/Stop plumbing (Loop), and the helpers of their loops.
package run

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Sleep waits for d or until ctx ends, and reports whether ctx is still alive.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Hold waits d, or until ctx ends, while a batch that could not be stored stays in the consumer's
// hand (unacknowledged, to be stored again after the wait, so that no later message is stored before
// it). If keep is not nil it runs every keepEvery meanwhile, the first time at once: JetStream's
// InProgress, which keeps the broker from delivering the held messages again. Hold reports whether
// ctx is still alive.
func Hold(ctx context.Context, d time.Duration, keep func(), keepEvery time.Duration) bool {
	if keep == nil || keepEvery <= 0 {
		return Sleep(ctx, d)
	}
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return ctx.Err() == nil
		}
		keep()
		if !Sleep(ctx, min(left, keepEvery)) {
			return false
		}
	}
}

// Backoff is a delay that doubles from Base up to Max each time Next is called, until Reset.
type Backoff struct {
	Base, Max time.Duration
	next      time.Duration
}

// Next returns the delay to wait now.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.Base
	}
	d := b.next
	b.next = min(b.next*2, b.Max)
	return d
}

// Reset starts again from Base.
func (b *Backoff) Reset() { b.next = 0 }

// Text formats a header value as text: strings as they are, byte slices if they are valid UTF-8,
// numbers and booleans in decimal, times in RFC 3339, anything else as JSON. It reports false for nil
// and for what cannot be formatted.
func Text(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case []byte:
		if !utf8.Valid(x) {
			return "", false
		}
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case time.Time:
		return x.Format(time.RFC3339Nano), true
	case fmt.Stringer:
		return x.String(), true
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// Stopped reports whether ctx, a consumer's consuming context, has ended: Stop was called or Start's
// context ended.
func Stopped(ctx context.Context) bool { return ctx.Err() != nil }
