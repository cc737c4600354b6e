package pgenv

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestNothingFound checks the message given when no server can be found or started. Not parallel:
// it changes PATH and the package's search variables. It never skips: where Docker answers (Open
// would start a container), the container step is replaced by one that fails as it does without
// Docker; elsewhere the real step runs and fails.
func TestNothingFound(t *testing.T) {
	oldURL, oldPatterns, oldStart := localURL, searchPatterns, containerStart
	defer func() { localURL, searchPatterns, containerStart = oldURL, oldPatterns, oldStart }()
	if exec.Command("docker", "info").Run() == nil {
		t.Log("Docker answers: the container step is replaced by one that finds no Docker")
		containerStart = func(context.Context, func(string, ...any)) (*Server, error) {
			return nil, errors.New("cannot connect to the Docker daemon (hidden by the test)")
		}
	}
	t.Setenv("PATH", t.TempDir())
	localURL = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
	searchPatterns = nil
	_, err := Open(context.Background(), Auto, "", t.Logf)
	if err == nil {
		t.Fatal("Open found a server")
	}
	for _, want := range []string{"DATABASE_URL: not set", "127.0.0.1:5432", "initdb and pg_ctl not found", "Docker", "Install PostgreSQL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
	t.Logf("%v", err)
}

// The throwaway cluster is tested end to end by TestDemoOnThrowawayCluster (package main).

func TestRedact(t *testing.T) {
	if got := redact("postgres://u:secret@h:5432/db"); got != "postgres://u:xxxxx@h:5432/db" {
		t.Fatal(got)
	}
}
