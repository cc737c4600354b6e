package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer safe for a command writing and a test reading.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// command is a `ledger` command run in-process by run().
type command struct {
	stdout, stderr syncBuffer
	cancel         context.CancelFunc
	done           chan struct{}
	code           int
}

// startCommand runs `ledger args...` until the test ends or stop is called.
func startCommand(t *testing.T, args ...string) *command {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &command{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.code = run(ctx, args, &c.stdout, &c.stderr, testChildCommand)
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

// stop cancels the command (as SIGTERM does), waits for it and returns its exit status.
func (c *command) stop() int {
	c.cancel()
	<-c.done
	return c.code
}

var addrRE = regexp.MustCompile(`msg="ledger: serving" addr=(\S+)`)

// waitServing waits for serve's "serving" log line and returns its address.
func (c *command) waitServing(t *testing.T) string {
	t.Helper()
	var addr string
	waitFor(t, "serve to listen", func() bool {
		select {
		case <-c.done:
			t.Fatalf("serve exited with status %d before serving:\n%s", c.code, c.stderr.String())
		default:
		}
		if m := addrRE.FindStringSubmatch(c.stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return addr
}

// scrape reads GET /metrics and returns the value of every sample, keyed by its line's name and
// labels as exposed (`name{label="value",...}`; labels are sorted by name).
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}
