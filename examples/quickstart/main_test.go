package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

const childEnv = "TXINBOX_QUICKSTART_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		main() // this test binary, re-executed, is the quickstart program
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The quick start runs as a real process on an empty schema: it migrates, receives with a duplicate,
// handles every message once (the refund after its credit, by ordering key), and on SIGTERM stops
// cleanly and exits 0.
func TestQuickstartRunsAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	schema, url := testdb.NewSchema(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "DATABASE_URL="+url, "TXINBOX_SCHEMA="+schema)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	want := map[string]bool{
		"received evt-1 inserted": true, "received evt-1 duplicate": true, "received evt-2 inserted": true,
		"received evt-3 inserted": true, "handled evt-1 credit o-1 500": true, "handled evt-2 credit o-2 700": true,
		"handled evt-3 refund o-2": true,
	}
	var seen []string
	deadline := time.After(2 * time.Minute) // a hang, not a timing requirement
	for len(want) > 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("quickstart ended early; output %q", seen)
			}
			seen = append(seen, l)
			delete(want, l)
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("quickstart output %q; still missing %v", seen, want)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		seen = append(seen, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("quickstart exit after SIGTERM: %v; output %q", err, seen)
	}
	if last := seen[len(seen)-1]; last != "stopped" {
		t.Fatalf("last line %q, want stopped; output %q", last, seen)
	}
	for _, l := range seen {
		if strings.HasPrefix(l, "handled evt-1") && l != "handled evt-1 credit o-1 500" {
			t.Fatalf("unexpected line %q", l)
		}
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT order_id || ':' || amount_cents || ':' || refunded FROM "+
		pgx.Identifier{schema, "credits"}.Sanitize()+" ORDER BY order_id")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "o-1:500:false,o-2:700:true" {
		t.Fatalf("credits = %v, want o-1 credited, o-2 credited and refunded", got)
	}
}

// The quick start keeps its inbox bounded by itself: run with a Retention of one minute (so
// generations of one minute, the default Generation), its pool's maintainer rotates the generations,
// and once the generation its messages were stored in is retired, the completed messages, past their
// dedup window, are gone from the inbox table. Nothing but the program runs: no rotation by hand. (Waits for
// two rotations: about two minutes.)
func TestQuickstartKeepsItsInboxBoundedByItself(t *testing.T) {
	t.Parallel()
	schema, url := testdb.NewSchema(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "DATABASE_URL="+url, "TXINBOX_SCHEMA="+schema, "TXINBOX_RETENTION=1m")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	handled := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "handled ") {
				if n++; n == 3 {
					close(handled)
				}
			}
		}
	}()
	select {
	case <-handled:
	case <-time.After(2 * time.Minute): // a hang, not a timing requirement
		t.Fatal("the quick start did not handle its three messages")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(query string) int64 {
		var n int64
		if err := conn.QueryRow(ctx, strings.ReplaceAll(query, "{schema}", pgx.Identifier{schema}.Sanitize())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	g0 := count(`SELECT gen FROM {schema}.inbox_ring`)
	deadline := time.Now().Add(6 * time.Minute) // a hang, not a timing requirement
	// A message is handled, then its batch commits.
	for count(`SELECT count(*) FROM {schema}.inbox WHERE state = 'completed'`) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the quick start's three messages were not completed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The messages' generation g0 is retired by the rotation that begins g0+2; the messages left
	// their window a minute after they completed, so they are not copied forward.
	for count(`SELECT gen FROM {schema}.inbox_ring`) < g0+2 {
		if time.Now().After(deadline) {
			t.Fatalf("generation %d, want %d: the quick start's pool did not rotate", count(`SELECT gen FROM {schema}.inbox_ring`), g0+2)
		}
		time.Sleep(time.Second)
	}
	if n := count(`SELECT count(*) FROM {schema}.inbox`); n != 0 {
		t.Fatalf("%d messages left in the inbox after their generation was retired, want 0", n)
	}
	if n := count(`SELECT count(*) FROM {schema}.inbox_maintenance WHERE job = 'rotate'`); n != 1 {
		t.Fatalf("no run of the maintainer's job rotate recorded")
	}
}

// The README's quick start is this program's README:begin..README:end region, word for word.
func TestReadmeQuickStartIsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, region, ok := strings.Cut(string(src), "\t// README:begin\n")
	region, _, ok2 := strings.Cut(region, "\t// README:end\n")
	if !ok || !ok2 {
		t.Fatal("main.go has no README:begin/README:end region")
	}
	var want strings.Builder
	for l := range strings.Lines(region) {
		want.WriteString(strings.TrimPrefix(l, "\t"))
	}
	_, section, ok := strings.Cut(string(readme), "\n## Quick start\n")
	_, block, ok2 := strings.Cut(section, "```go\n")
	block, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no ```go block under ## Quick start")
	}
	if block != want.String() {
		t.Fatalf("README's quick start differs from examples/quickstart/main.go; paste this into README.md:\n%s", want.String())
	}
}
