package bench

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Footprint is what one measured phase cost the process and the server.
type Footprint struct {
	PeakRSSMB float64 // VmHWM of this process during the phase, MiB (see ResetPeakRSS)
	RSSExact  bool    // false if the peak could not be reset before the phase (then it is the process peak so far)
	MaxConns  int     // most server connections open at once with the phase's application_name
}

// ResetPeakRSS returns freed memory to the OS and resets the process's peak RSS (VmHWM) by writing
// 5 to /proc/self/clear_refs, so the next PeakRSSMB covers only what follows. It reports whether
// the reset worked.
func ResetPeakRSS() bool {
	runtime.GC()
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// PeakRSSMB reads VmHWM from /proc/self/status, in MiB.
func PeakRSSMB() float64 { return procStatusKB("VmHWM:") / 1024 }

func procStatusKB(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, field); ok {
			v, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return v
		}
	}
	return 0
}

// Monitor samples, every 50 ms, how many server connections carry an application_name.
type Monitor struct {
	env    *Env
	app    string
	exact  bool
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	max    int
}

// StartMonitor resets the peak RSS and starts counting the connections of app.
func (e *Env) StartMonitor(ctx context.Context, app string) *Monitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &Monitor{env: e, app: app, exact: ResetPeakRSS(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			var n int
			if err := e.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err == nil {
				m.mu.Lock()
				m.max = max(m.max, n)
				m.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// Stop ends sampling and returns the footprint of the phase.
func (m *Monitor) Stop() Footprint {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return Footprint{PeakRSSMB: PeakRSSMB(), RSSExact: m.exact, MaxConns: m.max}
}
