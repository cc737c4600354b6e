package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/retention"
)

// ---- migrate ----

func migrateCommand(sub, summary, details string, do func(m *migrate.Migrator, a *app) ([]migrate.MigrationResult, error)) *command {
	return &command{
		name:    "migrate " + sub,
		summary: summary,
		details: "Migrations are txinbox's embedded goose migrations; their state is kept in the table\n" +
			migrate.VersionTable + " of the schema. Two processes migrating at once are serialised by an\n" +
			"advisory lock.\n" + details,
		run: func(a *app, fs *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return usagef("migrate "+sub, "unexpected arguments: %s", strings.Join(args, " "))
			}
			cc, err := a.connConfig("migrate " + sub)
			if err != nil {
				return err
			}
			m, err := migrate.New(a.ctx, cc, txinbox.Store{Schema: a.schema}, nil)
			if err != nil {
				return err
			}
			defer m.Close()
			rs, err := do(m, a)
			if err != nil {
				return err
			}
			return a.printMigrations(sub, rs)
		},
	}
}

var (
	migrateUp = migrateCommand("up", "apply every pending migration (creates the schema if missing)", `
The schema is created if it is missing. Exits 0, saying so, when the schema is up to date.`,
		func(m *migrate.Migrator, a *app) ([]migrate.MigrationResult, error) { return m.Up(a.ctx) })
	migrateDown = migrateCommand("down", "roll back the most recent migration (drops the txinbox tables at version 1)", `
When no migration is applied (the schema does not exist, was never migrated, or is rolled back
already) it writes nothing, prints "nothing to roll back" and exits 0, as 'up' does when the
schema is up to date.`,
		func(m *migrate.Migrator, a *app) ([]migrate.MigrationResult, error) { return m.Down(a.ctx) })
	migrateStatus = migrateCommand("status", "list the migrations and whether each is applied (read-only)", `
Read-only: it never creates the schema or the version table. For a schema that does not exist or
was never migrated it says so and lists every migration as pending.`,
		func(m *migrate.Migrator, a *app) ([]migrate.MigrationResult, error) {
			st, err := m.State(a.ctx)
			if err != nil {
				return nil, err
			}
			if !a.json {
				switch {
				case !st.SchemaExists:
					fmt.Fprintf(a.stdout, "schema %s does not exist: no migration is applied ('txinbox migrate up --schema %s' creates it)\n", a.schema, a.schema)
				case !st.Migrated:
					fmt.Fprintf(a.stdout, "schema %s was never migrated (it has no %s table): no migration is applied\n", a.schema, migrate.VersionTable)
				}
			}
			return m.Status(a.ctx)
		})
)

type migrationJSON struct {
	Version int64  `json:"version"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
}

func (a *app) printMigrations(sub string, rs []migrate.MigrationResult) error {
	if a.json {
		out := make([]migrationJSON, len(rs))
		for i, r := range rs {
			out[i] = migrationJSON{r.Version, r.Name, r.Applied}
		}
		return a.writeJSON(out)
	}
	if len(rs) == 0 {
		switch sub {
		case "up":
			fmt.Fprintf(a.stdout, "schema %s is up to date\n", a.schema)
		case "down":
			fmt.Fprintf(a.stdout, "nothing to roll back: no migration is applied in schema %s\n", a.schema)
		default:
			fmt.Fprintf(a.stdout, "no migrations\n")
		}
		return nil
	}
	if sub != "status" {
		verb := map[string]string{"up": "applied", "down": "rolled back"}[sub]
		for _, r := range rs {
			fmt.Fprintf(a.stdout, "%s %s (version %d) in schema %s\n", verb, r.Name, r.Version, a.schema)
		}
		return nil
	}
	tw := a.table("VERSION", "NAME", "STATE")
	for _, r := range rs {
		state := "pending"
		if r.Applied {
			state = "applied"
		}
		row(tw, r.Version, r.Name, state)
	}
	return tw.Flush()
}

// ---- stats ----

var statsHealth bool

// statsJSON is the JSON of stats --health: the consumers' counts (the array stats --json prints)
// and admin.Health's fields.
type statsJSON struct {
	Consumers []admin.ConsumerStats `json:"consumers"`
	admin.Health
}

var statsCmd = &command{
	name:    "stats",
	summary: "count messages per consumer and state; dead row versions and the xmin horizon",
	details: `
Columns: PENDING waiting for an attempt; PROCESSING claimed by a worker; COMPLETED dedup records kept
(EXPIRED of them past their dedup window, awaiting the cleaner); DEAD dead letters, kept until
replayed or discarded; DONE/MIN completed in the last minute; OLDEST DUE how long the oldest due
pending message has waited. Reads the whole inbox table once.

Then the txinbox tables' PostgreSQL statistics (estimates): live rows, dead row versions not yet
reclaimed by vacuum, last vacuum and autovacuum; and what holds back the xmin horizon, below which
vacuum reclaims nothing in any table: the other session holding the oldest snapshot (pid, application,
state, transaction start, age), replication slots and prepared transactions. Without superuser or
pg_read_all_stats, PostgreSQL hides other roles' sessions' state and times ("hidden").

With --json: the JSON array of admin.ConsumerStats, the wait as oldest_pending_seconds (seconds,
fractional), as before. With --json --health: an object {"consumers": that array, "tables": [...],
"horizon": {...}, "generation": {...}} (admin.Health's JSON; ages in seconds as age_seconds,
prepared_age_seconds).`,
	flags: func(fs *flag.FlagSet) {
		statsHealth = false
		fs.BoolVar(&statsHealth, "health", false, `with --json: print an object {"consumers", "tables", "horizon"} instead of the consumers' array`)
	},
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("stats", "unexpected arguments: %s", strings.Join(args, " "))
		}
		c, pool, err := a.client("stats")
		if err != nil {
			return err
		}
		defer pool.Close()
		st, err := c.Stats(a.ctx)
		if err != nil {
			return err
		}
		if st == nil {
			st = []admin.ConsumerStats{}
		}
		if a.json && !statsHealth {
			return a.writeJSON(st) // oldest_pending_seconds: see admin.ConsumerStats
		}
		h, err := c.Health(a.ctx)
		if err != nil {
			return err
		}
		if a.json {
			return a.writeJSON(statsJSON{Consumers: st, Health: h})
		}
		if len(st) == 0 {
			fmt.Fprintf(a.stdout, "no messages in schema %s\n", a.schema)
		} else {
			tw := a.table("CONSUMER", "PENDING", "PROCESSING", "COMPLETED", "EXPIRED", "DEAD", "DONE/MIN", "OLDEST DUE")
			for _, s := range st {
				age := "-"
				if s.OldestPendingAge > 0 {
					age = s.OldestPendingAge.Round(time.Second).String()
				}
				row(tw, s.Consumer, s.Pending, s.Processing, s.Completed, s.Expired, s.Dead, s.CompletedLastMinute, age)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		return a.printHealth(h)
	},
}

// printHealth writes the tables' statistics and the xmin horizon of stats.
func (a *app) printHealth(h admin.Health) error {
	fmt.Fprintln(a.stdout)
	tw := a.table("TABLE", "LIVE ROWS", "DEAD ROWS", "LAST VACUUM", "LAST AUTOVACUUM")
	when := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	}
	for _, t := range h.Tables {
		row(tw, t.Table, t.LiveRows, t.DeadRows, when(t.LastVacuum), when(t.LastAutovacuum))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	if g := h.Generation; g != nil {
		fmt.Fprintf(a.stdout, "generation: %d, begun %s\n", g.Number, when(g.BeganAt))
	}
	hz := h.Horizon
	if d := hz.Holder; d == nil {
		fmt.Fprintln(a.stdout, "xmin horizon: no other session holds a snapshot")
	} else {
		fmt.Fprintf(a.stdout, "xmin horizon: held by pid %d (role %s, application %s, %s), xmin age %d transactions",
			d.PID, dash(d.Role), dash(d.ApplicationName), dash(d.BackendType), d.XminAge)
		switch {
		case d.DetailsHidden:
			fmt.Fprint(a.stdout, "; state and age hidden (grant pg_read_all_stats to see them)")
		case d.XactStart.IsZero():
			fmt.Fprintf(a.stdout, ", %s, no transaction", dash(d.State))
		default:
			fmt.Fprintf(a.stdout, ", %s, transaction open %s (since %s)", dash(d.State), d.Age.Round(time.Second), d.XactStart.Format(time.RFC3339))
		}
		fmt.Fprintln(a.stdout)
	}
	if hz.SlotName != "" {
		fmt.Fprintf(a.stdout, "replication slot %s: xmin age %d transactions\n", hz.SlotName, hz.SlotXminAge)
	}
	if hz.PreparedGID != "" {
		fmt.Fprintf(a.stdout, "prepared transaction %q: xmin age %d transactions, prepared %s ago\n", hz.PreparedGID, hz.PreparedXminAge, hz.PreparedAge.Round(time.Second))
	}
	fmt.Fprintf(a.stdout, "database frozen xid age: %d transactions\n", hz.FrozenXidAge)
	return nil
}

// ---- dead ----

// defaultListLimit is the default of the list commands' --limit (admin.DeadFilter.Limit's default).
const defaultListLimit = 100

// deadFlags are the filters of the dead letters.
type deadFlags struct {
	consumer, kind, errorContains, since, until string
	limit                                       int
	before, after                               int64
	all                                         bool
}

func (d *deadFlags) register(fs *flag.FlagSet, paging, all bool) {
	fs.StringVar(&d.consumer, "consumer", "", "only dead letters of this consumer")
	fs.StringVar(&d.kind, "kind", "", "only dead letters of this kind")
	fs.StringVar(&d.errorContains, "error", "", "only dead letters whose last error contains this text, in any case (no wildcards)")
	fs.StringVar(&d.since, "since", "", "only dead letters that died at or after this time (RFC 3339, YYYY-MM-DD, or an age such as 24h or 7d)")
	fs.StringVar(&d.until, "until", "", "only dead letters that died before this time (same forms as --since)")
	if paging {
		fs.IntVar(&d.limit, "limit", defaultListLimit, fmt.Sprintf("most dead letters listed (at most %d)", limits.DeadListLimit))
		fs.Int64Var(&d.before, "before", 0, "list the dead letters that died before the one of this seq (the next page: the seq of the last one listed)")
		fs.Int64Var(&d.after, "after", 0, "no longer used: dead letters are listed newest first; page with --before SEQ")
	}
	if all {
		fs.BoolVar(&d.all, "all", false, "act on every dead letter matching the filters instead of a list of ids")
	}
}

func (d *deadFlags) filter(cmd string) (admin.DeadFilter, error) {
	f := admin.DeadFilter{View: admin.Inbox, Consumer: d.consumer, Kind: d.kind, ErrorContains: d.errorContains, Limit: d.limit}
	if d.before > 0 {
		f.Before = strconv.FormatInt(d.before, 10) // an inbox letter's cursor is its seq
	}
	if d.after != 0 {
		return f, usagef(cmd, "--after is gone: dead letters are listed newest first, and the next page is --before SEQ (the seq of the last one listed)")
	}
	if d.before < 0 {
		return f, usagef(cmd, "--before must be a seq (a positive number) from a previous list")
	}
	// Checked here, before any connection: a name no message can have is a typo, not an empty result.
	for _, n := range []struct{ flag, v string }{{"--consumer", d.consumer}, {"--kind", d.kind}} {
		if n.v == "" {
			continue
		}
		if err := txinbox.ValidateName(n.v); err != nil {
			return f, usagef(cmd, "%s: %v", n.flag, err)
		}
	}
	if !utf8.ValidString(d.errorContains) || strings.ContainsRune(d.errorContains, 0) {
		return f, usagef(cmd, "--error: %q is not valid UTF-8 text without NUL", d.errorContains)
	}
	var err error
	if f.Since, err = parseTime(d.since); err != nil {
		return f, usagef(cmd, "--since: %v", err)
	}
	if f.Until, err = parseTime(d.until); err != nil {
		return f, usagef(cmd, "--until: %v", err)
	}
	if d.limit < 1 || d.limit > limits.DeadListLimit {
		return f, usagef(cmd, "--limit must be between 1 and %d", limits.DeadListLimit)
	}
	return f, nil
}

func (d *deadFlags) filtered() bool {
	return d.consumer != "" || d.kind != "" || d.errorContains != "" || d.since != "" || d.until != ""
}

func (d *deadFlags) allScope() (bool, string) { return d.all, d.consumer }

// parseTime reads an RFC 3339 time, a date (midnight UTC), or an age before now ("24h", "7d").
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if age, err := parseAge(s); err == nil {
		return time.Now().Add(-age), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: use RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02) or an age (24h, 7d)", s)
}

// parseAge reads a Go duration ("90m", "36h") or a number of days ("30d").
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration (examples: 90m, 36h, 30d)", s)
	}
	return d, nil
}

var deadListFlags deadFlags

var deadList = &command{
	name:    "dead list",
	summary: "list dead letters, newest first",
	details: `
Dead letters are messages whose handler gave up: out of attempts, a permanent error, or
undecodable. They are kept until replayed or discarded. They are listed newest first, in the order
they died (SEQ; a message replayed and dead again gets a new one), as the console lists them for the
same filters: --error matches a substring of the last error in any case. When the list is full,
more may follow: pass --before with the SEQ of the last one listed. With --json: an array of
objects (seq, id, consumer, key, kind, died_at, attempts_started, attempts_failed, undecodable,
last_error: admin.Admin.ListDead's txinbox.DeadLetter, its cursor as seq); 'txinbox dead show ID'
shows every field of one.`,
	flags: func(fs *flag.FlagSet) { deadListFlags = deadFlags{}; deadListFlags.register(fs, true, false) },
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("dead list", "unexpected arguments: %s", strings.Join(args, " "))
		}
		f, err := deadListFlags.filter("dead list")
		if err != nil {
			return err
		}
		c, pool, err := a.client("dead list")
		if err != nil {
			return err
		}
		defer pool.Close()
		ls, err := c.ListDead(a.ctx, f)
		if err != nil {
			return err
		}
		if a.json {
			out := make([]deadLetterJSON, len(ls)) // never null
			for i, l := range ls {
				out[i] = newDeadLetterJSON(l)
			}
			return a.writeJSON(out)
		}
		if len(ls) == 0 {
			fmt.Fprintf(a.stdout, "no dead letters\n")
			return nil
		}
		tw := a.table("SEQ", "ID", "CONSUMER", "KIND", "KEY", "ATTEMPTS", "DIED", "LAST ERROR")
		for _, l := range ls {
			row(tw, l.Cursor, l.ID, l.Consumer, l.Kind, short(l.Key, 40), l.AttemptsStarted, when(l.DiedAt), short(l.LastError, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(ls) == f.Limit {
			fmt.Fprintf(a.stderr, "more may follow: add --before %s\n", ls[len(ls)-1].Cursor)
		}
		return nil
	},
}

// deadLetterJSON is one dead letter as dead list --json prints it: txinbox.DeadLetter's fields of an
// inbox letter, its cursor as seq (a number: an inbox letter's cursor is its seq).
type deadLetterJSON struct {
	Seq             int64     `json:"seq"`
	ID              int64     `json:"id"`
	Consumer        string    `json:"consumer"`
	Key             string    `json:"key"`
	Kind            string    `json:"kind"`
	DiedAt          time.Time `json:"died_at"`
	AttemptsStarted int       `json:"attempts_started"`
	AttemptsFailed  int       `json:"attempts_failed"`
	Undecodable     bool      `json:"undecodable"`
	LastError       string    `json:"last_error"`
}

func newDeadLetterJSON(l txinbox.DeadLetter) deadLetterJSON {
	seq, _ := strconv.ParseInt(l.Cursor, 10, 64)
	return deadLetterJSON{Seq: seq, ID: l.ID, Consumer: l.Consumer, Key: l.Key, Kind: l.Kind, DiedAt: l.DiedAt,
		AttemptsStarted: l.AttemptsStarted, AttemptsFailed: l.AttemptsFailed, Undecodable: l.Undecodable, LastError: l.LastError}
}

var deadShow = &command{
	name:    "dead show",
	args:    "ID",
	summary: "show one stored message (in any state) with every field",
	details: `
A dead message's time of death is labelled "died" (its dedup window does not apply: it is kept until
replayed or discarded); a completed message's is "completed", with the end of its dedup window
("expires"). A message delivered as a CloudEvents event (every event of a txinbox outbox is) names
that event: its id and source ("upstream event", "upstream source"; admin.Upstream, from the headers
ce-id and ce-source), the event id and service to look it up with in the publishing service (its
'txinbox outbox dead show EVENT-ID'). With --json: the JSON of inbox.StoredMessage, where a dead
message's completed_at is when it died, with upstream_event_id and upstream_source when the message
has them.`,
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) != 1 {
			return usagef("dead show", "dead show needs exactly one message id")
		}
		ids, err := parseIDs("dead show", args)
		if err != nil {
			return err
		}
		c, pool, err := a.client("dead show")
		if err != nil {
			return err
		}
		defer pool.Close()
		m, err := c.GetMessage(a.ctx, ids[0])
		if err != nil {
			return err
		}
		if a.json {
			return a.writeJSON(newMessageJSON(m))
		}
		return printMessage(a.stdout, m)
	},
}

// messageJSON is the JSON of dead show: the message's, and the event it was delivered as.
type messageJSON struct {
	inbox.StoredMessage
	UpstreamEventID string `json:"upstream_event_id,omitempty"`
	UpstreamSource  string `json:"upstream_source,omitempty"`
}

func newMessageJSON(m inbox.StoredMessage) messageJSON {
	j := messageJSON{StoredMessage: m}
	j.UpstreamEventID, j.UpstreamSource = admin.Upstream(m)
	return j
}

func printMessage(w io.Writer, m inbox.StoredMessage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	field := func(name string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", name, v) }
	field("id", m.ID)
	field("consumer", m.Consumer)
	field("key", m.Key)
	field("kind", m.Kind)
	field("state", m.State)
	field("ordering key", dash(m.OrderingKey))
	field("attempts", fmt.Sprintf("%d started, %d failed", m.AttemptsStarted, m.AttemptsFailed))
	field("received", when(m.ReceivedAt))
	field("next run", when(m.NextRunAt))
	field("started", when(m.StartedAt))
	if m.State == inbox.StateDead {
		field("died", when(m.CompletedAt)) // a dead message's completed_at is its death
	} else {
		field("completed", when(m.CompletedAt))
		field("expires", when(m.ExpiresAt))
	}
	field("owner", dash(m.Owner))
	field("lease until", when(m.LeaseUntil))
	field("token", m.Token)
	field("fingerprint", m.Fingerprint) // hex, as in the JSON form
	upID, upSource := admin.Upstream(m)
	field("upstream event", dash(upID))
	field("upstream source", dash(upSource))
	if len(m.Headers) > 0 {
		h, _ := json.Marshal(m.Headers)
		field("headers", string(h))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if m.LastError != "" {
		fmt.Fprintf(w, "last error:\n  %s\n", strings.ReplaceAll(strings.TrimRight(m.LastError, "\n"), "\n", "\n  "))
	}
	printHistory(w, m.History)
	fmt.Fprintf(w, "payload:\n%s\n", indentJSON(m.Payload))
	if m.Raw != nil {
		raw := m.Raw
		if len(raw) > 4096 {
			raw = raw[:4096]
		}
		fmt.Fprintf(w, "raw (%d bytes, undecodable; first 4096 shown):\n%q\n", len(m.Raw), raw)
	}
	if m.Result != nil {
		fmt.Fprintf(w, "result:\n%s\n", indentJSON(m.Result))
	}
	return nil
}

func parseIDs(cmd string, args []string) ([]int64, error) {
	return parseIDsOf(cmd, "a message id", args)
}

// parseIDsOf reads the ids in args (each alone, or comma-separated), each of them what ("a message
// id").
func parseIDsOf(cmd, what string, args []string) ([]int64, error) {
	ids, _, err := parseIDArgs(cmd, what, args, false)
	return ids, err
}

// parseIDArgs reads the ids in args (each alone, or comma-separated), each of them what ("a message
// id"): a positive integer, or, with byEventID, an outbox event's event id (a UUID). The two slices
// are aligned, one entry per id given: ids[i] is the id, or 0 where the argument was the event id
// eventIDs[i] (resolveEventIDs fills those in once connected).
func parseIDArgs(cmd, what string, args []string, byEventID bool) (ids []int64, eventIDs []string, err error) {
	ids = make([]int64, 0, len(args))
	eventIDs = make([]string, 0, len(args))
	for _, s := range args {
		for _, part := range strings.Split(s, ",") {
			if part == "" {
				continue
			}
			id, err := strconv.ParseInt(part, 10, 64)
			switch {
			case err == nil && id > 0:
				ids, eventIDs = append(ids, id), append(eventIDs, "")
			case byEventID && textcheck.IsEventID(part):
				ids, eventIDs = append(ids, 0), append(eventIDs, part)
			case byEventID:
				return nil, nil, usagef(cmd, "%q is not %s: give its ID (a positive integer) or its EVENT ID (a UUID), as 'txinbox outbox dead list' shows them", part, what)
			default:
				return nil, nil, usagef(cmd, "%q is not %s (a positive integer)", part, what)
			}
		}
	}
	if len(ids) > limits.AdminIDs {
		return nil, nil, usagef(cmd, "%d ids: at most %d at once (use --all with filters)", len(ids), limits.AdminIDs)
	}
	return ids, eventIDs, nil
}

// resolveEventIDs fills in ids the id of each event id given in eventIDs (aligned as parseIDArgs
// returns them), with one statement. An event id that no stored event has is an error, before
// anything is done: there is no id to report it by.
func resolveEventIDs(c *admin.Admin, a *app, ids []int64, eventIDs []string) error {
	var given []string
	for _, e := range eventIDs {
		if e != "" {
			given = append(given, e)
		}
	}
	if len(given) == 0 {
		return nil
	}
	found, err := c.OutboxIDs(a.ctx, given...)
	if err != nil {
		return err
	}
	var unknown []string
	j := 0
	for i, e := range eventIDs {
		if e == "" {
			continue
		}
		if ids[i] = found[j]; ids[i] == 0 {
			unknown = append(unknown, e)
		}
		j++
	}
	if len(unknown) > 0 {
		return fmt.Errorf("no outbox event has event id %s (never published, discarded, or sent and removed after the retention window): nothing was done",
			strings.Join(unknown, ", "))
	}
	return nil
}

// bulkSpec is a replay or discard command of dead rows (dead replay and discard, outbox dead replay
// and discard): ids, or --all with filters.
type bulkSpec struct {
	verb, past, summary, details string
	skipIDs                      string // why a given id is skipped
	skipAll                      string // why a dead row listed by --all is skipped
	// guarded: --all without the scope flag (--consumer, --topic) needs --yes, and --dry-run
	// previews (with check).
	guarded bool
	// do acts on the dead rows ids of a view (admin.Admin.ReplayDead, DiscardDead); check returns
	// the ids do would act on now (admin.Admin.DeadAmong).
	do, check func(c *admin.Admin, ctx context.Context, v admin.View, ids ...int64) ([]int64, error)
}

// bulkFlags are the filter flags of the dead rows a bulk command acts on with --all (deadFlags,
// outboxFlags), building the admin filter.
type bulkFlags interface {
	register(fs *flag.FlagSet, paging, all bool)
	filter(cmd string) (admin.DeadFilter, error)
	filtered() bool
	// allScope returns --all and the scope flag's value (--consumer, --topic; "": every one).
	allScope() (all bool, scope string)
}

// bulkRows is what the bulk commands of the dead letters and of the outbox's dead events differ in,
// besides their bulkSpec: their admin.View, the words of their output and errors, and their flags.
type bulkRows struct {
	view    admin.View
	group   string // the commands' group: "dead", "outbox dead" (with list and show commands)
	ids     string // the ids a command takes: "message ids", "event ids"
	idWord  string // one of them, for parseIDArgs: "a message id", "an event id"
	one     string // one row in errors and help: "dead letter", "dead event"
	counted string // what a printed count counts: "dead letter(s)", "dead outbox event(s)"
	scope   string // the flag that bounds --all to one owner: "consumer", "topic"
	// byEventID: the commands also take event ids (UUIDs: the outbox's events), resolved to ids once
	// connected.
	byEventID bool
	// flags returns new flags, with --limit at its most (the page size of --all).
	flags func() bulkFlags
}

// count counts the rows f matches now and bounds f to them (not those that die meanwhile).
func (r bulkRows) count(c *admin.Admin, a *app, f *admin.DeadFilter) (int64, error) {
	n, err := c.CountDead(a.ctx, *f)
	f.Before = n.Before // CountDead's bound
	return n.Matching, err
}

// page returns the ids of f's next page of rows, newest first (none after the last), and moves f
// past them.
func (r bulkRows) page(c *admin.Admin, a *app, f *admin.DeadFilter) ([]int64, error) {
	ls, err := c.ListDead(a.ctx, *f)
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	f.Before = ls[len(ls)-1].Cursor
	page := make([]int64, len(ls))
	for i, l := range ls {
		page[i] = l.ID
	}
	return page, nil
}

// bulkCommand is the replay or discard command b of the dead rows r.
func bulkCommand(r bulkRows, b bulkSpec) *command {
	var d bulkFlags
	var yes, dryRun bool
	name := r.group + " " + b.verb
	return &command{
		name:    name,
		args:    "ID... | --all",
		summary: b.summary,
		details: b.details,
		flags: func(fs *flag.FlagSet) {
			d = r.flags()
			d.register(fs, false, true)
			yes, dryRun = false, false
			if b.guarded {
				fs.BoolVar(&yes, "yes", false, fmt.Sprintf("confirm --all without --%s: every matching %s of every %s", r.scope, r.one, r.scope))
				fs.BoolVar(&dryRun, "dry-run", false, "print what would be "+b.past+", and change nothing")
			}
		},
		run: func(a *app, fs *flag.FlagSet, args []string) error {
			all, scope := d.allScope()
			switch {
			case all && len(args) > 0:
				return usagef(name, "pass either ids or --all, not both")
			case !all && len(args) == 0:
				return usagef(name, "%s needs %s (from 'txinbox %s list'), or --all to %s every %s matching the filters", name, r.ids, r.group, b.verb, r.one)
			case !all && d.filtered():
				return usagef(name, "the filters only apply with --all")
			case yes && !all:
				return usagef(name, "--yes only applies with --all")
			}
			var ids []int64
			var eventIDs []string // given instead of ids (byEventID), resolved once connected
			var f admin.DeadFilter
			var err error
			if all {
				if f, err = d.filter(name); err != nil {
					return err
				}
			} else if ids, eventIDs, err = parseIDArgs(name, r.idWord, args, r.byEventID); err != nil {
				return err
			}
			if b.guarded && all && scope == "" && !yes && !dryRun {
				return usagef(name, "%s --all without --%s would %s the matching %ss of every %s: add --%s, preview with --dry-run, or confirm with --yes", name, r.scope, b.verb, r.one, r.scope, r.scope)
			}
			c, pool, err := a.client(name)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := resolveEventIDs(c, a, ids, eventIDs); err != nil {
				return err
			}
			act := b.do
			if dryRun {
				act = b.check
			}
			var done, skipped []int64
			if all {
				// The rows matching now, a page at a time, newest first; each page acted on.
				matching, err := r.count(c, a, &f)
				if err != nil {
					return err
				}
				p := a.progress(name, r.one+"s")
				defer p.end()
				for {
					page, err := r.page(c, a, &f)
					if err != nil {
						return err
					}
					if len(page) == 0 {
						break
					}
					got := page // listed as dead: a dry run would act on each
					if !dryRun {
						if got, err = act(c, a.ctx, r.view, page...); err != nil {
							return err
						}
					}
					done = append(done, got...)
					skipped = append(skipped, missing(page, got)...)
					p.set(int64(len(done)+len(skipped)), matching, 0, false)
				}
				p.end()
				slices.Sort(done) // reported in id order
				slices.Sort(skipped)
			} else {
				if done, err = act(c, a.ctx, r.view, ids...); err != nil {
					return err
				}
				skipped = missing(ids, done)
			}
			why := b.skipIDs
			if all {
				why = b.skipAll
			}
			if a.json {
				out := map[string]any{b.past: nonNil(done), "skipped": nonNil(skipped)}
				if dryRun {
					out["dry_run"] = true
				}
				if err := a.writeJSON(out); err != nil {
					return err
				}
			} else if dryRun {
				fmt.Fprintf(a.stdout, "dry run: would %s %d %s%s\n", b.verb, len(done), r.counted, idList(done))
				if len(skipped) > 0 {
					fmt.Fprintf(a.stdout, "would skip %d (%s)%s\n", len(skipped), why, idList(skipped))
				}
				fmt.Fprintf(a.stdout, "nothing was changed\n")
			} else {
				fmt.Fprintf(a.stdout, "%s %d %s%s\n", b.past, len(done), r.counted, idList(done))
				if len(skipped) > 0 {
					fmt.Fprintf(a.stdout, "skipped %d (%s)%s\n", len(skipped), why, idList(skipped))
				}
			}
			if !all && len(skipped) > 0 {
				if dryRun {
					return fmt.Errorf("%d of the ids would not be %s: check them with 'txinbox %s show ID'", len(skipped), b.past, r.group)
				}
				return fmt.Errorf("%d of the ids were not %s: check them with 'txinbox %s show ID'", len(skipped), b.past, r.group)
			}
			return nil
		},
	}
}

// deadRows are the dead letters, for dead replay and dead discard.
var deadRows = bulkRows{view: admin.Inbox, group: "dead", ids: "message ids", idWord: "a message id",
	one: "dead letter", counted: "dead letter(s)", scope: "consumer",
	flags: func() bulkFlags { return &deadFlags{limit: limits.DeadListLimit} },
}

var (
	deadReplay = bulkCommand(deadRows, bulkSpec{verb: "replay", past: "replayed",
		summary: "put dead letters back to pending (same row and key, attempts reset)",
		details: `
A replayed message keeps its key, payload and last error, starts again at attempt 1 and runs as
soon as a worker is free; a redelivery of its key is still a duplicate. Messages stored undecodable
are skipped (they can only die again: discard them). Exits 1 if a given id was not replayed.`,
		skipIDs: "not dead, not found, or stored undecodable",
		skipAll: "stored undecodable, or no longer dead",
		do:      (*admin.Admin).ReplayDead,
	})
	deadDiscard = bulkCommand(deadRows, bulkSpec{verb: "discard", past: "discarded", summary: "delete dead letters", details: `
A discarded message is deleted: its key is free again, so a later delivery of it is accepted as a
new message. --all without --consumer needs --yes (it spans every consumer). --dry-run prints what
would be discarded and changes nothing. Exits 1 if a given id was not (with --dry-run: would not
be) discarded.`,
		skipIDs: "not dead, or not found",
		skipAll: "no longer dead",
		guarded: true,
		do:      (*admin.Admin).DiscardDead,
		check:   (*admin.Admin).DeadAmong,
	})
)

// ---- pending ----

var pendingFlags struct {
	consumer, kind string
	dryRun         bool
}

var pendingDiscard = &command{
	name:    "pending discard",
	args:    "ID... | --consumer C",
	summary: "delete pending messages no worker has claimed",
	details: `
For the messages of a retired or mistyped consumer. Deletes pending messages with their queue
rows: those given by id, or every pending message of
--consumer (and --kind), or the given ids of --consumer. Their keys are free again: a later delivery
is accepted as a new message. A message a worker has claimed is never deleted: it is reported as
claimed (wait for it to finish, or stop the workers, and run again). Completed and dead messages
are never touched (see 'discard-older' and 'dead discard'). --dry-run prints what would be discarded and
changes nothing. Exits 1 if a given id was not (with --dry-run: would not be) discarded; with
--consumer alone, claimed messages are reported and the exit status is 0.`,
	flags: func(fs *flag.FlagSet) {
		pendingFlags.consumer, pendingFlags.kind, pendingFlags.dryRun = "", "", false
		fs.StringVar(&pendingFlags.consumer, "consumer", "", "discard the pending messages of this consumer")
		fs.StringVar(&pendingFlags.kind, "kind", "", "only messages of this kind (with --consumer or ids)")
		fs.BoolVar(&pendingFlags.dryRun, "dry-run", false, "print what would be discarded, and change nothing")
	},
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		const name = "pending discard"
		p := pendingFlags
		if p.consumer == "" && len(args) == 0 {
			return usagef(name, "pending discard needs message ids or --consumer (a --kind alone would span every consumer)")
		}
		for _, n := range []struct{ flag, v string }{{"--consumer", p.consumer}, {"--kind", p.kind}} {
			if n.v == "" {
				continue
			}
			if err := txinbox.ValidateName(n.v); err != nil {
				return usagef(name, "%s: %v", n.flag, err)
			}
		}
		ids, err := parseIDs(name, args)
		if err != nil {
			return err
		}
		c, pool, err := a.client(name)
		if err != nil {
			return err
		}
		defer pool.Close()
		r, err := c.DiscardPending(a.ctx, admin.PendingFilter{Consumer: p.consumer, Kind: p.kind, IDs: ids, DryRun: p.dryRun})
		if err != nil {
			if len(r.Discarded) > 0 && !p.dryRun {
				fmt.Fprintf(a.stderr, "discarded %d pending message(s) before the error\n", len(r.Discarded))
			}
			return err
		}
		skipped := missing(ids, append(append([]int64{}, r.Discarded...), r.Claimed...))
		why := "not found, or not pending: completed or dead"
		if p.consumer != "" || p.kind != "" {
			why = "not found, not pending, or not of the --consumer/--kind given"
		}
		if a.json {
			out := map[string]any{"discarded": r.Discarded, "claimed": r.Claimed, "skipped": nonNil(skipped)}
			if p.dryRun {
				out["dry_run"] = true
			}
			if err := a.writeJSON(out); err != nil {
				return err
			}
		} else {
			verb, left, skip := "discarded", "left", "skipped"
			if p.dryRun {
				verb, left, skip = "dry run: would discard", "would leave", "would skip"
			}
			fmt.Fprintf(a.stdout, "%s %d pending message(s)%s\n", verb, len(r.Discarded), idList(r.Discarded))
			if len(r.Claimed) > 0 {
				fmt.Fprintf(a.stdout, "%s %d claimed by a worker (not discarded)%s\n", left, len(r.Claimed), idList(r.Claimed))
			}
			if len(skipped) > 0 {
				fmt.Fprintf(a.stdout, "%s %d (%s)%s\n", skip, len(skipped), why, idList(skipped))
			}
			if p.dryRun {
				fmt.Fprintf(a.stdout, "nothing was changed\n")
			}
		}
		if n := len(missing(ids, r.Discarded)); n > 0 {
			if p.dryRun {
				return fmt.Errorf("%d of the ids would not be discarded", n)
			}
			return fmt.Errorf("%d of the ids were not discarded: check them with 'txinbox dead show ID' (it shows a message in any state)", n)
		}
		return nil
	},
}

func missing(asked, done []int64) []int64 {
	got := make(map[int64]bool, len(done))
	for _, id := range done {
		got[id] = true
	}
	var out []int64
	for _, id := range asked {
		if !got[id] {
			out = append(out, id)
			got[id] = true
		}
	}
	return out
}

func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

func idList(ids []int64) string {
	if len(ids) == 0 {
		return ""
	}
	const most = 20
	parts := make([]string, 0, most+1)
	for i, id := range ids {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-most))
			break
		}
		parts = append(parts, strconv.FormatInt(id, 10))
	}
	return ": " + strings.Join(parts, ", ")
}

// ---- discard-older (alias: purge) ----

var discardOlderFlags struct {
	olderThan string
	states    string
}

var discardOlderCmd = &command{
	name:    "discard-older",
	args:    "--older-than AGE",
	summary: "delete completed (or dead) messages finished more than AGE ago (alias: purge)",
	details: `
Deletes in batches of 1000 rows, each a short transaction, so receiving and processing go on.
Completed messages are deleted whatever their dedup window: the key of a discarded message is
accepted again as a new message, so choose an age past the last time a duplicate can arrive. The
cleaner already deletes completed messages once their dedup window ends; discard-older is for
shortening it once, or for dead letters. Pending and processing messages are never deleted by it.
'purge' is an alias kept from earlier versions.`,
	flags: func(fs *flag.FlagSet) {
		discardOlderFlags.olderThan, discardOlderFlags.states = "", ""
		fs.StringVar(&discardOlderFlags.olderThan, "older-than", "", "required: age of the messages to delete, such as 720h or 30d")
		fs.StringVar(&discardOlderFlags.states, "state", "completed", "states to discard, comma-separated: completed, dead")
	},
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("discard-older", "unexpected arguments: %s", strings.Join(args, " "))
		}
		if discardOlderFlags.olderThan == "" {
			return usagef("discard-older", "discard-older needs --older-than (for example --older-than 30d)")
		}
		age, err := parseAge(discardOlderFlags.olderThan)
		if err != nil {
			return usagef("discard-older", "--older-than: %v", err)
		}
		var states []inbox.State
		for _, s := range strings.Split(discardOlderFlags.states, ",") {
			switch st := inbox.State(strings.TrimSpace(s)); st {
			case inbox.StateCompleted, inbox.StateDead:
				states = append(states, st)
			default:
				return usagef("discard-older", "--state: %q cannot be discarded by age (use completed, dead, or completed,dead)", s)
			}
		}
		p := a.progress("discard-older", "messages deleted")
		defer p.end()
		c, pool, err := a.clientWith("discard-older", admin.Config{Progress: func(g admin.Progress) { p.set(g.Done, 0, g.Share, false) }})
		if err != nil {
			return err
		}
		defer pool.Close()
		r, err := c.DiscardOlder(a.ctx, admin.OlderFilter{OlderThan: age, States: states})
		n := r.Discarded
		p.end()
		if err != nil {
			if n > 0 {
				fmt.Fprintf(a.stderr, "discarded %d message(s) before the error\n", n)
			}
			return err
		}
		if a.json {
			return a.writeJSON(map[string]any{"discarded": n})
		}
		fmt.Fprintf(a.stdout, "discarded %d message(s) (%s, finished more than %s ago)\n", n, discardOlderFlags.states, age)
		return nil
	},
}

// purgeCmd is discard-older under its former name.
var purgeCmd = &command{
	name: "purge", args: discardOlderCmd.args, summary: "alias of discard-older",
	details: discardOlderCmd.details, flags: discardOlderCmd.flags, run: discardOlderCmd.run,
}

// ---- clean ----

var cleanFlags struct{ batchSize int }

var cleanCmd = &command{
	name:    "clean",
	summary: "delete completed messages past their dedup window and expired idempotency keys (one full pass)",
	details: `
A completed message is kept as a dedup record until the end of its window (the Store's Retention,
7 days by default); after it the key is accepted again as a new message whether or not the row was
deleted. The schema's maintainer (run by every runner) retires expired rows in running
services, a generation at a time; this command makes one full pass now, in short statements that
skip locked rows, so receiving and processing go on. Dead messages are
never cleaned (see 'dead discard' and 'discard-older --state dead').`,
	flags: func(fs *flag.FlagSet) {
		cleanFlags.batchSize = 1000 // retention.CleanOptions.BatchSize's default
		fs.IntVar(&cleanFlags.batchSize, "batch-size", cleanFlags.batchSize, fmt.Sprintf("most rows deleted per statement (1 to %d)", limits.CleanBatchSize))
	},
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("clean", "unexpected arguments: %s", strings.Join(args, " "))
		}
		if cleanFlags.batchSize < 1 || cleanFlags.batchSize > limits.CleanBatchSize {
			return usagef("clean", "--batch-size must be between 1 and %d", limits.CleanBatchSize)
		}
		c, pool, err := a.client("clean")
		if err != nil {
			return err
		}
		defer pool.Close()
		p := a.progress("clean", "messages deleted")
		defer p.end()
		var poll func() (int64, bool)
		if p.active() {
			poll = inboxDeletes(a, c)
		}
		stop := p.ticking(poll)
		r, err := retention.Clean(a.ctx, txinbox.Store{DB: pool, Schema: a.schema}, retention.CleanOptions{BatchSize: cleanFlags.batchSize})
		stop()
		p.end()
		if err != nil {
			if r.Deleted > 0 {
				fmt.Fprintf(a.stderr, "deleted %d expired message(s) before the error\n", r.Deleted)
			}
			return err
		}
		if a.json {
			return a.writeJSON(map[string]any{"deleted": r.Deleted, "statements": r.Batches, "keys_deleted": r.KeysDeleted})
		}
		fmt.Fprintf(a.stdout, "deleted %d expired message(s) in %d statement(s), %d expired idempotency key(s)\n", r.Deleted, r.Batches, r.KeysDeleted)
		return nil
	},
}

var rotateCmd = &command{
	name:    "rotate",
	summary: "begin a new generation of the inbox now, retiring the generation before last",
	details: `
The inbox table is a ring of three generations (migration 00006). The schema's maintainer (run by
every runner) begins a new one every Generation (the Store's Retention by default); this
command does it now: the messages of the generation before last that must stay (pending, dead, and completed ones still in
their window) are copied into the new generation, and the rest leave with a TRUNCATE. Receives and
workers of every consumer wait while it copies; it waits at most --lock-timeout for transactions
that have touched the inbox.`,
	flags: func(fs *flag.FlagSet) {
		rotateFlags.lockTimeout = 2 * time.Second // retention.RotateOptions.LockTimeout's default
		fs.DurationVar(&rotateFlags.lockTimeout, "lock-timeout", rotateFlags.lockTimeout, "longest wait for the retired generation's lock")
	},
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("rotate", "unexpected arguments: %s", strings.Join(args, " "))
		}
		if rotateFlags.lockTimeout < time.Millisecond {
			return usagef("rotate", "--lock-timeout must be at least 1ms")
		}
		_, pool, err := a.client("rotate")
		if err != nil {
			return err
		}
		defer pool.Close()
		p := a.progress("rotate", "")
		defer p.end()
		stop := p.ticking(nil) // one statement: only the time elapsed is known
		r, err := retention.Rotate(a.ctx, txinbox.Store{DB: pool, Schema: a.schema},
			retention.RotateOptions{LockTimeout: rotateFlags.lockTimeout, Force: true})
		stop()
		p.end()
		if err != nil {
			return err
		}
		if a.json {
			return a.writeJSON(map[string]any{"rotated": r.Rotated, "generation": r.Generation, "copied": r.Copied,
				"duration_seconds": r.Duration.Seconds()})
		}
		if !r.Rotated {
			fmt.Fprintf(a.stdout, "not rotated (another rotation ran, or consumers kept being registered): generation %d\n", r.Generation)
			return nil
		}
		fmt.Fprintf(a.stdout, "generation %d begun: %d message(s) kept from the retired one, in %v\n", r.Generation, r.Copied, r.Duration.Round(time.Millisecond))
		return nil
	},
}

var rotateFlags struct{ lockTimeout time.Duration }

// inboxDeletes returns a poll of the rows deleted from the inbox table since it was made, from
// PostgreSQL's statistics (admin.TableHealth.Deletes, reported by the deleting session about once
// a second; deletes of other sessions count too): an estimate of clean's progress, which reports
// nothing until it ends. ok is false when the statistics could not be read.
func inboxDeletes(a *app, c *admin.Admin) func() (int64, bool) {
	read := func() (int64, bool) {
		h, err := c.Health(a.ctx)
		if err != nil {
			return 0, false
		}
		for _, t := range h.Tables {
			if t.Table == "inbox" {
				return t.Deletes, true
			}
		}
		return 0, false
	}
	base, ok := read()
	return func() (int64, bool) {
		n, ok2 := read()
		return max(n-base, 0), ok && ok2
	}
}

// ---- output ----

func (a *app) writeJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) table(header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

func row(tw *tabwriter.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c)
	}
	fmt.Fprintln(tw)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// short cuts s to n runes on one line.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func indentJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "  ", "  "); err != nil {
		return "  " + string(b)
	}
	return "  " + buf.String()
}
