package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes where the benchmarks ran.
type Machine struct {
	CPU      string // model name
	Cores    int
	MemoryGB float64
	Kernel   string
	Go       string
	Postgres string            // version()
	Settings map[string]string // key server settings
	Order    []string          // Settings keys in display order
}

// serverSettings are the settings that decide commit and write costs.
var serverSettings = []string{
	"shared_buffers", "synchronous_commit", "fsync", "full_page_writes", "wal_level", "max_wal_size",
	"checkpoint_timeout", "autovacuum", "max_connections", "work_mem", "track_commit_timestamp",
}

// DescribeMachine reads /proc and the server's settings.
func (e *Env) DescribeMachine(ctx context.Context) (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Settings: map[string]string{}, Order: serverSettings}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		var v float64
		_, _ = fmt.Sscanf(kb, "%f", &v) // unparsable: 0 GB, reported as such
		m.MemoryGB = v / (1 << 20)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if err := e.Admin.QueryRow(ctx, "SELECT version()").Scan(&m.Postgres); err != nil {
		return m, err
	}
	for _, name := range serverSettings {
		var v string
		if err := e.Admin.QueryRow(ctx, "SELECT current_setting($1, true)", name).Scan(&v); err == nil {
			m.Settings[name] = v
		}
	}
	return m, nil
}

func procField(path, field string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == field {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Load is a snapshot of how busy the machine and the server were (other engineers' tests add noise).
type Load struct {
	LoadAvg     string // /proc/loadavg: 1, 5 and 15 minute averages
	OtherConns  int    // server connections not opened by txbench
	OtherActive int    // of those, running a statement
}

// SampleLoad reads the load average and counts the server's other connections.
func (e *Env) SampleLoad(ctx context.Context) Load {
	var l Load
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			l.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	_ = e.Admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'active')
		FROM pg_stat_activity WHERE backend_type = 'client backend' AND NOT starts_with(application_name, 'txbench')`).
		Scan(&l.OtherConns, &l.OtherActive)
	return l
}

func (l Load) String() string {
	return fmt.Sprintf("load average %s; other server connections: %d (%d active)", l.LoadAvg, l.OtherConns, l.OtherActive)
}
