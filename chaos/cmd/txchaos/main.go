// Command txchaos runs txinbox under failure and checks that every message is applied exactly once.
//
// It starts worker processes (this binary, re-executed with the worker subcommand) and producers that
// deliver every message one to five times, then, for the chaos phase: kills a random worker with
// SIGKILL every 0.5 to 2 seconds and restarts it, terminates random worker and producer connections
// from the server side (pg_terminate_backend, found by application_name), and mixes in poison messages
// whose handler always fails. Afterwards it waits for the workers to finish and checks that the ledger
// holds every message exactly once, that nothing is left pending or processing, and that the dead
// letters are exactly the poison messages. It exits 1 if an invariant fails, 2 if it could not run.
//
//	txchaos [--database-url URL] [--duration 5m] [--messages 50000] [--workers 4] [--producers 4] [--seed N] [--short]
//
// The run uses a fresh schema txchaos_<random>, dropped afterwards (--keep keeps it).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/txinbox/txinbox/chaos"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(chaos.WorkerMain())
	}
	os.Exit(run())
}

func run() int {
	var (
		url       = flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
		duration  = flag.Duration("duration", 0, "length of the chaos phase (default 5m; 15s with --short)")
		messages  = flag.Int("messages", 0, "unique messages (default 50000; 5000 with --short)")
		poison    = flag.Int("poison", 0, "poison messages (default 10; 5 with --short; -1 for none)")
		workers   = flag.Int("workers", 4, "worker processes")
		producers = flag.Int("producers", 4, "producers")
		seed      = flag.Uint64("seed", 0, "random seed (default: the current time; printed)")
		short     = flag.Bool("short", false, "the short run of make test (under a minute)")
		schema    = flag.String("schema", "", "use this schema (created if missing, never dropped) instead of a fresh one")
		keep      = flag.Bool("keep", false, "keep the generated schema after the run")
		logDir    = flag.String("log-dir", "", "directory for the worker logs (default: a new temporary directory)")
		noKills   = flag.Bool("no-kills", false, "do not kill workers")
		noCuts    = flag.Bool("no-cuts", false, "do not cut connections")
		noRotate  = flag.Bool("no-rotations", false, "do not rotate the inbox's generations")
		quiet     = flag.Bool("quiet", false, "no progress lines")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: txchaos [flags]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		return 2
	}
	if *url == "" {
		fmt.Fprintln(os.Stderr, "txchaos: no database: set --database-url or DATABASE_URL")
		return 2
	}
	cfg := chaos.Config{URL: *url}
	if *short {
		cfg = chaos.Short(*url)
	}
	if *duration > 0 {
		cfg.Duration = *duration
	}
	if *messages > 0 {
		cfg.Messages = *messages
	}
	if *poison != 0 {
		cfg.Poison = *poison
	}
	cfg.Workers, cfg.Producers, cfg.Seed = *workers, *producers, *seed
	cfg.Schema, cfg.Keep, cfg.LogDir = *schema, *keep, *logDir
	cfg.NoKills, cfg.NoCuts, cfg.NoRotations = *noKills, *noCuts, *noRotate
	if !*quiet {
		cfg.Progress = os.Stderr
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "txchaos: %v (after %v)\n", err, time.Since(start).Round(time.Millisecond))
		return 2
	}
	if !rep.OK() {
		return 1
	}
	return 0
}
