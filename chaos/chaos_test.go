package chaos_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/chaos"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// The chaos runs start their worker processes by re-executing this test binary: TestMain finds
// chaos.WorkerEnv set and runs a worker instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(chaos.WorkerEnv) != "" {
		os.Exit(chaos.WorkerMain())
	}
	os.Exit(m.Run())
}

// workerCommand starts a worker process: this test binary, running no tests.
func workerCommand() []string { return []string{os.Args[0], "-test.run=^$"} }

// seed is TXCHAOS_SEED if set (to replay a failed run's choices), else 0 (random, reported).
func seed(t *testing.T) uint64 {
	s := os.Getenv("TXCHAOS_SEED")
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("TXCHAOS_SEED: %v", err)
	}
	return n
}

// logWriter writes to the test log, a line at a time.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// report logs rep and fails t if an invariant failed, showing the end of each worker's log.
func report(t *testing.T, rep *chaos.Report, err error) {
	t.Helper()
	if rep != nil {
		rep.Print(logWriter{t})
	}
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(rep.LogDir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("--- end of %s:\n%s", filepath.Base(l), b)
	}
	t.Fatalf("chaos run failed (seed %d): %s", rep.Seed, strings.Join(rep.Failures, "; "))
}

// TestChaosShort is the short chaos run: 5,000 messages delivered 1 to 5 times by 4 producers, 4
// worker processes killed with SIGKILL every 0.5 to 2 seconds, connections cut at random, 5 poison
// messages. Every message must be applied exactly once and the dead letters must be the poison set.
func TestChaosShort(t *testing.T) {
	t.Parallel()
	schema, url := testdb.NewSchema(t)
	cfg := chaos.Short(url)
	cfg.Schema, cfg.Seed, cfg.WorkerCommand, cfg.LogDir = schema, seed(t), workerCommand(), t.TempDir()
	cfg.Progress = logWriter{t}
	rep, err := chaos.Run(context.Background(), cfg)
	report(t, rep, err)
	// The run must actually have been disturbed (kills, cuts and rotations happen on a clock,
	// whatever the load).
	if rep.Kills == 0 || rep.CutsWorker+rep.CutsProducer == 0 || rep.Rotations == 0 {
		t.Fatalf("no chaos happened: %d kills, %d cuts, %d rotations", rep.Kills, rep.CutsWorker+rep.CutsProducer, rep.Rotations)
	}
}
