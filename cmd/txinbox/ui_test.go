package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// txinbox ui refuses a non-loopback address without a password (usage error, nothing served).
func TestUIRefusesRemoteWithoutPassword(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:8080"} {
		r := cli(t, "postgres://127.0.0.1:1/none", "ui", "--addr", addr)
		r.want(t, exitUsage, "", uiPasswordEnv)
	}
}

func TestUIHelp(t *testing.T) {
	t.Parallel()
	r := cli(t, "", "ui", "--help")
	r.want(t, exitOK, uiPasswordEnv, "")
	for _, flag := range []string{"-addr", "-read-only", "-user", "-allow-remote-without-password"} {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("ui --help lacks %s:\n%s", flag, r.stdout)
		}
	}
}

// With TXINBOX_UI_PASSWORD set, every page needs basic authentication; SIGINT stops the server
// cleanly.
func TestUIBasicAuth(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "ui", "--addr", "127.0.0.1:0", "--schema", db.Schema, "--read-only")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, uiPasswordEnv+"=s3cret")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no start line: %v", err)
	}
	start := strings.Index(line, "http://")
	end := strings.Index(line[start:], " ")
	if start < 0 || end < 0 || !strings.Contains(line, "read-only") {
		t.Fatalf("start line: %q", line)
	}
	base := line[start : start+end]
	get := func(user, pass string) int {
		req, _ := http.NewRequest(http.MethodGet, base, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", c)
	}
	if c := get("txinbox", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", c)
	}
	if c := get("txinbox", "s3cret"); c != http.StatusOK {
		t.Errorf("right password: %d, want 200", c)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
}
