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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Footprint is what one measured phase cost the process and the server.
type Footprint struct {
	PeakRSSMB float64 // VmHWM of this process during the phase, MiB (see ResetPeakRSS)
	RSSExact  bool    // false if the peak could not be reset before the phase (then it is the process peak so far)
	MaxConns  int     // most server connections open at once with the phase's application_name
	// BusyBefore is the share of the machine's CPU time busy (with other work) just before the phase
	// started, after WaitQuiet: noise from other processes.
	BusyBefore float64
	// ClientCPU is the CPU time this process used during the phase, seconds (the benchmark's own
	// bookkeeping included). ServerCPU is the CPU time of the server backends serving the phase's
	// connections. Unlike rates, CPU time per message hardly depends on other load on the machine.
	ClientCPU, ServerCPU float64
	// WALFlushes and Commits are the server's WAL syncs (pg_stat_wal.wal_sync) and committed
	// transactions (pg_stat_database, all databases) during the phase. Where every message commits on
	// its own, the time an fsync takes sets the pace: a slow disk shows as few flushes, each carrying
	// many commits (group commit). The machine's storage is shared, and its fsync time varies.
	WALFlushes, Commits int64
	// OtherLoad is the share of the machine's CPU used during the phase by anything but this
	// process and the phase's backends (other processes, server background processes).
	OtherLoad float64
}

// OtherLoadNoted is the OtherLoad above which a phase is listed as noisy.
const OtherLoadNoted = 0.15

// machineBusy returns the CPU seconds the machine has spent busy since boot (/proc/stat).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy float64
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i != 3 && i != 4 && i < 8 { // all but idle and iowait; guest time is already in user
			busy += v
		}
	}
	return busy / clockTicks
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

// Monitor samples, every 50 ms, the server connections that carry an application_name: how many
// there are, and the CPU time their backend processes use (read from /proc/<pid>/stat: the server
// must run on this machine, as it does here; otherwise ServerCPU is 0).
type Monitor struct {
	env       *Env
	app       string
	exact     bool
	busy      float64
	selfStart float64
	busyStart float64 // machine busy CPU seconds (/proc/stat) at the start
	walStart  walCounts
	wallStart time.Time
	cancel    context.CancelFunc
	done      chan struct{}
	mu        sync.Mutex
	max       int
	base      map[int32]float64 // backend pid -> CPU seconds when first seen (0 if it started during the phase)
	last      map[int32]float64 // backend pid -> CPU seconds when last seen
}

// StartMonitor waits for the machine to be quiet (WaitQuiet), resets the peak RSS and starts
// sampling the connections of app.
func (e *Env) StartMonitor(ctx context.Context, app string) *Monitor {
	busy := e.WaitQuiet(ctx)
	if busy >= QuietBusy {
		e.NoisyPhases = append(e.NoisyPhases, fmt.Sprintf("%s (machine %.0f%% busy at its start)", app, 100*busy))
	}
	m := &Monitor{env: e, app: app, exact: ResetPeakRSS(), busy: busy, done: make(chan struct{}),
		base: map[int32]float64{}, last: map[int32]float64{}}
	m.sample(ctx, true)
	if r, ok := e.Tracer.(interface{ Reset() }); ok {
		r.Reset()
	}
	m.selfStart = selfCPU()
	m.walStart = e.walCounts(ctx)
	m.busyStart, m.wallStart = machineBusy(), time.Now()
	ctx, m.cancel = context.WithCancel(ctx)
	go func() {
		defer close(m.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			m.sample(ctx, false)
		}
	}()
	return m
}

func (m *Monitor) sample(ctx context.Context, first bool) {
	rows, err := m.env.Admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, m.app)
	if err != nil {
		return
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.max = max(m.max, len(pids))
	for _, pid := range pids {
		cpu, ok := procCPU(int(pid))
		if !ok {
			continue
		}
		if _, seen := m.base[pid]; !seen {
			m.base[pid] = 0
			if first {
				m.base[pid] = cpu
			}
		}
		m.last[pid] = cpu
	}
}

// Stop ends sampling and returns the footprint of the phase.
func (m *Monitor) Stop() Footprint {
	m.cancel()
	<-m.done
	self := selfCPU() - m.selfStart
	busy, wall := machineBusy()-m.busyStart, time.Since(m.wallStart)
	wal := m.env.walCounts(context.Background())
	m.sample(context.Background(), false)
	m.mu.Lock()
	defer m.mu.Unlock()
	var server float64
	for pid, cpu := range m.last {
		server += cpu - m.base[pid]
	}
	// Everything else the machine did meanwhile: other processes, and the server's background
	// processes (WAL writer, checkpointer), which partly work for this phase.
	other := max(0, busy-self-server) / wall.Seconds() / float64(runtime.NumCPU())
	if other > OtherLoadNoted {
		m.env.NoisyPhases = append(m.env.NoisyPhases, fmt.Sprintf("%s (other load %.0f%% of the machine during it)", m.app, 100*other))
	}
	return Footprint{PeakRSSMB: PeakRSSMB(), RSSExact: m.exact, MaxConns: m.max, BusyBefore: m.busy,
		ClientCPU: self, ServerCPU: server, OtherLoad: other,
		WALFlushes: wal.flushes - m.walStart.flushes, Commits: wal.commits - m.walStart.commits}
}

// walCounts is what Footprint.WALFlushes and Commits are computed from.
type walCounts struct{ flushes, commits int64 }

// walCounts reads the server's WAL sync and commit counters (zero if they cannot be read).
func (e *Env) walCounts(ctx context.Context) walCounts {
	var w walCounts
	_ = e.Admin.QueryRow(ctx, `SELECT (SELECT wal_sync FROM pg_stat_wal),
		(SELECT sum(xact_commit)::bigint FROM pg_stat_database)`).Scan(&w.flushes, &w.commits)
	return w
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat CPU times (100 on Linux).
const clockTicks = 100

// procCPU returns the user+system CPU seconds of process pid.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseFloat(f[11], 64) // field 14
	st, _ := strconv.ParseFloat(f[12], 64) // field 15
	return (ut + st) / clockTicks, true
}

// selfCPU returns this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
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
// engineers' tests, builds), for at most the remaining quiet budget of the run (5 s in quick
// mode, 3 minutes otherwise), and returns the last busy share measured.
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
