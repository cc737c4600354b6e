package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fileIsTerminal reports whether w is a terminal: an *os.File that is a character device (a tty;
// /dev/null is one too, where progress is lost harmlessly). No dependency: os.File.Stat's mode bits.
func fileIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// status is how far a long command has got: what progress draws.
type status struct {
	what   string // the command: "dead replay"
	unit   string // what Done counts: "dead letters"
	done   int64  // rows done; below 0: unknown
	total  int64  // rows in all; 0: unknown
	share  float64
	approx bool // done is an estimate
}

// line renders s after elapsed: rows done (of the total when known), their rate, the share done and
// the time left when the share is known (from the total, or given), and the time elapsed.
func (s status) line(elapsed time.Duration) string {
	var b strings.Builder
	b.WriteString(s.what + ": ")
	share := s.share
	if s.done >= 0 {
		if s.approx {
			b.WriteString("~")
		}
		b.WriteString(thousands(s.done))
		if s.total > 0 {
			b.WriteString(" of " + thousands(s.total))
			share = min(float64(s.done)/float64(s.total), 1)
		}
		b.WriteString(" " + s.unit)
		if secs := elapsed.Seconds(); secs >= 1 {
			b.WriteString(", " + thousands(int64(float64(s.done)/secs)) + "/s")
		}
		b.WriteString(", ")
	}
	if share > 0 {
		fmt.Fprintf(&b, "%.0f%%, ", 100*share)
	}
	b.WriteString(elapsed.Round(time.Second).String() + " elapsed")
	if share > 0 && share < 1 && elapsed >= time.Second {
		left := time.Duration(float64(elapsed) * (1 - share) / share)
		b.WriteString(", " + left.Round(time.Second).String() + " left")
	}
	return b.String()
}

// thousands writes n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// progress draws a long command's status on one line of stderr, redrawn in place (carriage return,
// then erase to the end of the line), at most every app.every, and erases it when the command
// ends. It is quiet (every method does nothing) unless stdout and stderr are terminals and --json
// is not given: see app.progress. Safe for concurrent use.
type progress struct {
	mu    sync.Mutex
	w     io.Writer // nil: quiet
	every time.Duration
	start time.Time
	last  time.Time // of the last draw
	s     status
	shown bool
}

const progressEvery = 200 * time.Millisecond

// progress returns the progress line of a command (see progress), drawn at once.
func (a *app) progress(what, unit string) *progress {
	p := &progress{start: time.Now(), every: a.every, s: status{what: what, unit: unit, done: -1}}
	if !a.json && a.terminal(a.stdout) && a.terminal(a.stderr) {
		p.w = a.stderr
		p.draw(true)
	}
	return p
}

// active reports whether p draws anything.
func (p *progress) active() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w != nil
}

// set records done rows (below 0: unknown) of total (0: unknown) and share (0 to 1; 0: unknown,
// or derived from total), and redraws.
func (p *progress) set(done, total int64, share float64, approx bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.s.done, p.s.total, p.s.share, p.s.approx = done, total, share, approx
	p.draw(false)
}

// tick redraws the line as it is (for the time elapsed), if it is due.
func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(false)
}

// draw writes the line, unless it was drawn less than p.every ago (and !force). p.mu is held
// (or p is not shared yet).
func (p *progress) draw(force bool) {
	if p.w == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(p.last) < p.every {
		return
	}
	p.last, p.shown = now, true
	fmt.Fprintf(p.w, "\r%s\x1b[K", p.s.line(now.Sub(p.start)))
}

// end erases the line, before the command prints its result.
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
	p.w = nil
}

// ticking redraws p every progressEvery (at most) until the returned stop is called (which waits for it), with
// poll's figures when poll is not nil (see set); for an operation that reports nothing while it runs.
func (p *progress) ticking(poll func() (done int64, ok bool)) (stop func()) {
	if !p.active() {
		return func() {}
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if poll == nil {
					p.tick()
				} else if n, ok := poll(); ok {
					p.set(n, 0, 0, true)
				} else {
					p.tick()
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}
