// Command txinbox administers a txinbox schema: migrations, statistics, dead letters, pending
// messages and purging, and the transactional outbox's events.
//
// Usage:
//
//	txinbox [--database-url URL] [--schema NAME] [--json] <command> [arguments]
//
// Commands:
//
//	migrate up|down|status   apply, roll back (one version) or list (read-only) the schema migrations
//	stats                    messages per consumer and state; dead row versions, the xmin horizon
//	dead list                list dead letters, newest first (filters: --consumer --kind --error --since --until)
//	dead show ID             show one stored message with every field and its last 10 failed attempts
//	dead replay ID...|--all  put dead letters back to pending (same key, attempts reset)
//	dead discard ID...|--all delete dead letters (--all needs --consumer or --yes; --dry-run)
//	pending discard ID...|--consumer C
//	                         delete pending messages no worker has claimed (--kind; --dry-run)
//	inflight list            list queued messages, newest first: pending, retrying, processing (filters: --consumer --state)
//	clean                    delete completed messages past their dedup window (one full pass)
//	rotate                   begin a new generation of the inbox now (retires the generation before last)
//	discard-older --older-than AGE   delete completed (and, with --state, dead) messages older than AGE (alias: purge)
//	outbox stats             the outbox's events per topic: pending, retrying, claimed, sent, dead; the lag
//	outbox inflight list     list queued outbox events, newest first: pending, retrying, processing (filters: --topic --state)
//	outbox dead list         list the outbox's dead events, newest first (filters: --topic --key --error --since --until)
//	outbox dead show ID      show one outbox event with every field and its last 10 failed attempts (by ID, or by EVENT ID: the UUID a consumer sees)
//	outbox dead replay ID...|--all   put dead outbox events back to pending (same event id, attempts reset)
//	outbox dead discard ID...|--all  delete dead outbox events (--all needs --topic or --yes; --dry-run)
//	pause consumer|topic NAME [--by WHO] [--reason TEXT]
//	                         pause a consumer's worker pools or an outbox topic's relaying, in every process
//	resume consumer|topic NAME   resume it (its pools or the relays are woken at once)
//	paused                   list what is paused, with who paused it, when and why
//	ui [--addr HOST:PORT]    serve the operator console (package console); see 'txinbox ui --help'
//
// The outbox commands that take event ids take each as its ID (a positive integer) or its EVENT ID
// (a UUID), the two ids 'outbox dead list' shows.
//
// The database comes from --database-url or the DATABASE_URL environment variable; the schema
// defaults to public. Output is a table by default and JSON with --json (in the JSON form of the
// admin and inbox packages' types). Long commands (clean, rotate, discard-older, dead replay and
// dead discard with --all, and the outbox's) draw their progress on one line of stderr when stdout and stderr are
// terminals and --json is not given. Every command takes --help. Exit status: 0 on success, 1 when the
// command failed (or a given id was not acted on), 2 for a usage error (nothing was written).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv, fileIsTerminal)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// usageError is a mistake in the command line: exit status 2.
type usageError struct {
	cmd string // the command whose usage applies, "" for the top level
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// errHelp asks for the usage of a command on stdout: exit status 0.
type errHelp struct{ cmd string }

func (errHelp) Error() string { return "help requested" }

// app is one invocation: the global options and where output goes.
type app struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// terminal reports whether an output is a terminal: progress is drawn only when stdout and
	// stderr both are (and without --json). every is the least time between two draws.
	terminal func(io.Writer) bool
	every    time.Duration

	databaseURL string
	schema      string
	json        bool
}

// command is a leaf command.
type command struct {
	name    string // "dead list"
	args    string // positional arguments, for the usage line
	summary string
	details string
	flags   func(fs *flag.FlagSet) // registers the command's own flags
	run     func(a *app, fs *flag.FlagSet, args []string) error
}

// run runs the command line argv and returns its exit status; terminal says whether an output is a
// terminal (fileIsTerminal, or a test's choice).
func run(ctx context.Context, argv []string, stdout, stderr io.Writer, getenv func(string) string, terminal func(io.Writer) bool) int {
	return newApp(ctx, stdout, stderr, getenv, terminal).run(argv)
}

// newApp returns an invocation writing to stdout and stderr.
func newApp(ctx context.Context, stdout, stderr io.Writer, getenv func(string) string, terminal func(io.Writer) bool) *app {
	return &app{ctx: ctx, stdout: stdout, stderr: stderr, getenv: getenv, terminal: terminal, every: progressEvery,
		schema: txinbox.DefaultSchema}
}

// run runs the command line argv and returns its exit status.
func (a *app) run(argv []string) int {
	stdout, stderr := a.stdout, a.stderr
	err := a.dispatch(argv)
	var help errHelp
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &help):
		a.printUsage(stdout, help.cmd)
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "txinbox: %s\n", strings.ReplaceAll(ue.msg, "txinbox: ", ""))
		if ue.cmd != "" {
			fmt.Fprintf(stderr, "Run 'txinbox %s --help' for usage.\n", ue.cmd)
		} else {
			fmt.Fprintf(stderr, "Run 'txinbox --help' for usage.\n")
		}
		return exitUsage
	default:
		fmt.Fprintf(stderr, "txinbox: %s\n", strings.ReplaceAll(explain(err, a.schema), "txinbox: ", ""))
		return exitFail
	}
}

// explain adds what to do to the errors an operator can fix.
func explain(err error, schema string) string {
	msg := err.Error()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Sprintf("the txinbox tables are not in schema %q (%s): check --schema, or create them with 'txinbox migrate up --schema %s'", schema, pgErr.Message, schema)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return msg + "\nCheck --database-url (or DATABASE_URL) and that the server is running."
	}
	return msg
}

var commands = []*command{migrateUp, migrateDown, migrateStatus, statsCmd, deadList, deadShow, deadReplay, deadDiscard, pendingDiscard, cleanCmd, rotateCmd, discardOlderCmd, purgeCmd,
	inflightList, outboxStats, outboxInflightList, outboxDeadList, outboxDeadShow, outboxDeadReplay, outboxDeadDiscard,
	newPauseCmd("consumer"), newPauseCmd("topic"), newResumeCmd("consumer"), newResumeCmd("topic"), pausedCmd, uiCmd}

// groups are the commands that take a sub-command.
var groups = map[string]string{
	"migrate":         "apply, roll back or list the schema migrations",
	"dead":            "list, show, replay or discard dead letters",
	"pending":         "discard pending messages that no worker has claimed",
	"inflight":        "list the queued messages: pending, retrying, processing",
	"outbox":          "count the outbox's events; list its queued events; list, show, replay or discard its dead events",
	"outbox inflight": "list the outbox's queued events: pending, retrying, processing",
	"outbox dead":     "list, show, replay or discard the outbox's dead events",
	"pause":           "pause a consumer or an outbox topic: nothing of it is claimed until resumed",
	"resume":          "resume a paused consumer or outbox topic",
}

func (a *app) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.databaseURL, "database-url", a.databaseURL, "PostgreSQL connection URL (default: $DATABASE_URL)")
	fs.StringVar(&a.schema, "schema", a.schema, "schema holding the txinbox tables")
	fs.BoolVar(&a.json, "json", a.json, "print JSON instead of a table")
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by run
	fs.Usage = func() {}
	return fs
}

// parse parses flags and positional arguments in any order ("dead show 7 --json").
func parse(cmd string, fs *flag.FlagSet, argv []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(argv); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp{cmd: cmd}
			}
			return nil, usagef(cmd, "%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(argv) > 0 && len(rest) < len(argv) && argv[len(argv)-len(rest)-1] == "--" {
			return append(pos, rest...), nil // everything after "--" is positional
		}
		pos = append(pos, rest[0])
		argv = rest[1:]
	}
}

func (a *app) dispatch(argv []string) error {
	top := newFlagSet("txinbox")
	a.globalFlags(top)
	if err := top.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp{}
		}
		return usagef("", "%v", err)
	}
	args := top.Args()
	if len(args) == 0 {
		return usagef("", "no command given")
	}
	name := args[0]
	if name == "help" {
		if len(args) > 1 {
			return errHelp{cmd: strings.Join(args[1:], " ")}
		}
		return errHelp{}
	}
	rest := args[1:]
	for { // a group takes a sub-command, which may be a group itself ("outbox dead list")
		if _, ok := groups[name]; !ok {
			break
		}
		if len(rest) == 0 {
			return usagef(name, "%s needs a sub-command: %s", name, strings.Join(subcommands(name), ", "))
		}
		if rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" {
			return errHelp{cmd: name}
		}
		name += " " + rest[0]
		rest = rest[1:]
	}
	cmd := find(name)
	if cmd == nil {
		if i := strings.LastIndex(name, " "); i > 0 {
			group := name[:i]
			return usagef(group, "unknown sub-command %q: use %s", name, strings.Join(subcommands(group), ", "))
		}
		return usagef("", "unknown command %q", name)
	}
	fs := newFlagSet(cmd.name)
	a.globalFlags(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	pos, err := parse(cmd.name, fs, rest)
	if err != nil {
		return err
	}
	if err := txinbox.ValidateSchema(a.schema); err != nil {
		return usagef(cmd.name, "--schema: %v", err)
	}
	return cmd.run(a, fs, pos)
}

func find(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// subcommands returns the sub-commands of group: its commands and groups, by their next word.
func subcommands(group string) []string {
	var out []string
	for _, c := range commands {
		if sub, ok := strings.CutPrefix(c.name, group+" "); ok {
			if next := strings.Fields(sub)[0]; !slices.Contains(out, next) {
				out = append(out, next)
			}
		}
	}
	return out
}

func (a *app) printUsage(w io.Writer, name string) {
	if cmd := find(name); cmd != nil {
		fmt.Fprintf(w, "Usage: txinbox %s [flags]", cmd.name)
		if cmd.args != "" {
			fmt.Fprintf(w, " %s", cmd.args)
		}
		fmt.Fprintf(w, "\n\n%s\n", cmd.summary)
		if cmd.details != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.details))
		}
		fs := newFlagSet(cmd.name)
		a.globalFlags(fs)
		if cmd.flags != nil {
			cmd.flags(fs)
		}
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		return
	}
	if summary, ok := groups[name]; ok {
		fmt.Fprintf(w, "Usage: txinbox %s <sub-command> [flags]\n\n%s\n\nSub-commands:\n", name, summary)
		var lines [][2]string
		for _, c := range commands {
			if strings.HasPrefix(c.name, name+" ") {
				lines = append(lines, [2]string{strings.TrimPrefix(c.name, name+" ") + " " + c.args, c.summary})
			}
		}
		printColumns(w, lines)
		fmt.Fprintf(w, "\nRun 'txinbox %s <sub-command> --help' for its flags.\n", name)
		return
	}
	fmt.Fprintf(w, `Usage: txinbox [flags] <command> [arguments]

txinbox administers a txinbox schema in PostgreSQL.

Commands:
`)
	var lines [][2]string
	for _, c := range commands {
		lines = append(lines, [2]string{c.name + " " + c.args, c.summary})
	}
	printColumns(w, lines)
	fmt.Fprintf(w, `
Flags (accepted before or after the command):
`)
	fs := newFlagSet("txinbox")
	a.globalFlags(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, `
Run 'txinbox <command> --help' for the flags of a command.
Exit status: 0 on success, 1 when the command failed, 2 for a usage error.
`)
}

// printColumns writes each line's two cells indented, the second aligned after the longest first.
func printColumns(w io.Writer, lines [][2]string) {
	width := 0
	for _, l := range lines {
		width = max(width, utf8.RuneCountInString(l[0]))
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s %s\n", width, l[0], l[1])
	}
}

// databaseURL returns --database-url, or DATABASE_URL.
func (a *app) url(cmd string) (string, error) {
	url := a.databaseURL
	if url == "" {
		url = a.getenv("DATABASE_URL")
	}
	if url == "" {
		return "", usagef(cmd, "no database: pass --database-url or set DATABASE_URL")
	}
	return url, nil
}

// connConfig parses the database URL.
func (a *app) connConfig(cmd string) (*pgx.ConnConfig, error) {
	url, err := a.url(cmd)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, usagef(cmd, "invalid database URL: %v", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	return cfg, nil
}

// client connects and returns an admin.Admin of the schema; close the pool when done.
func (a *app) client(cmd string) (*admin.Admin, *pgxpool.Pool, error) {
	return a.clientWith(cmd, admin.Config{})
}

// clientWith is client with the admin.Admin's configuration cfg.
func (a *app) clientWith(cmd string, cfg admin.Config) (*admin.Admin, *pgxpool.Pool, error) {
	url, err := a.url(cmd)
	if err != nil {
		return nil, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, usagef(cmd, "invalid database URL: %v", err)
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(a.ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	if err := pool.Ping(a.ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("cannot connect to the database: %w", err)
	}
	c, err := admin.New(txinbox.Store{DB: pool, Schema: a.schema}, cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}
