package bench

import (
	"bufio"
	"context"
	"fmt"
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
	// BusyBefore is the share of the machine's CPU time busy (with other work) just before the phase
	// started, after WaitQuiet: noise from other processes.
	BusyBefore float64
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
	busy   float64
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	max    int
}

// StartMonitor waits for the machine to be quiet (WaitQuiet), resets the peak RSS and starts counting
// the connections of app.
func (e *Env) StartMonitor(ctx context.Context, app string) *Monitor {
	busy := e.WaitQuiet(ctx)
	if busy >= QuietBusy {
		e.NoisyPhases = append(e.NoisyPhases, fmt.Sprintf("%s (%.0f%% busy)", app, 100*busy))
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &Monitor{env: e, app: app, exact: ResetPeakRSS(), busy: busy, cancel: cancel, done: make(chan struct{})}
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
	return Footprint{PeakRSSMB: PeakRSSMB(), RSSExact: m.exact, MaxConns: m.max, BusyBefore: m.busy}
}

// cpuBusy returns the share of CPU time the machine spent busy over d (from /proc/stat).
func cpuBusy(d time.Duration) float64 {
	read := func() (idle, total float64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseFloat(f, 64)
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return idle, total
	}
	i0, t0 := read()
	time.Sleep(d)
	i1, t1 := read()
	if t1 <= t0 {
		return 0
	}
	return 1 - (i1-i0)/(t1-t0)
}

// QuietBusy is the CPU share above which WaitQuiet waits for other processes to finish.
const QuietBusy = 0.25

// WaitQuiet waits until the machine's CPU is less than QuietBusy busy over half a second (other
// engineers' tests, builds), for at most the remaining quiet budget of the run (15 s in quick
// mode, 5 minutes otherwise), and returns the last busy share measured.
func (e *Env) WaitQuiet(ctx context.Context) float64 {
	for {
		start := time.Now()
		busy := cpuBusy(500 * time.Millisecond)
		if busy < QuietBusy || e.quietBudget <= 0 || ctx.Err() != nil {
			return busy
		}
		e.Log.Info("machine busy; waiting", "busy", fmt.Sprintf("%.0f%%", 100*busy), "budget", e.quietBudget.Round(time.Second))
		time.Sleep(time.Second)
		e.quietBudget -= time.Since(start)
		e.QuietWaited += time.Since(start)
	}
}
