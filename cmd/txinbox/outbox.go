package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
)

// ---- outbox stats ----

var outboxStats = &command{
	name:    "outbox stats",
	summary: "count the outbox's events per topic and state, with the lag",
	details: `
Columns: PENDING unsent, waiting and never claimed (for its first attempt, its NotBefore, or the
event of its key before it); RETRYING unsent, waiting and claimed before (failed, handed back by a
stopping relay, or replayed); CLAIMED held by a relay (in flight); SENT sent and kept for the
retention window; DEAD dead events, kept until replayed or discarded; LAG the age of the oldest
unsent event (since it was published, or since its NotBefore), not counting events whose NotBefore
is ahead. Reads the queue and each queued event by id, and the whole outbox table once.

With --json: the JSON array of admin.OutboxTopicStats, the lag as oldest_unsent_seconds (seconds,
fractional).`,
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("outbox stats", "unexpected arguments: %s", strings.Join(args, " "))
		}
		c, pool, err := a.client("outbox stats")
		if err != nil {
			return err
		}
		defer pool.Close()
		st, err := c.OutboxStats(a.ctx)
		if err != nil {
			return err
		}
		if a.json {
			return a.writeJSON(st) // never null: OutboxStats returns a non-nil slice
		}
		if len(st) == 0 {
			fmt.Fprintf(a.stdout, "no outbox events in schema %s\n", a.schema)
			return nil
		}
		tw := a.table("TOPIC", "PENDING", "RETRYING", "CLAIMED", "SENT", "DEAD", "LAG")
		for _, s := range st {
			lag := "-"
			if s.OldestUnsentAge > 0 {
				lag = s.OldestUnsentAge.Round(time.Second).String()
			}
			row(tw, s.Topic, s.Pending, s.Retrying, s.Claimed, s.Sent, s.Dead, lag)
		}
		return tw.Flush()
	},
}

// ---- outbox dead ----

// outboxFlags are the filters of the outbox's dead events.
type outboxFlags struct {
	topic, key, errorContains, since, until string
	limit                                   int
	before                                  string
	all                                     bool
}

func (d *outboxFlags) register(fs *flag.FlagSet, paging, all bool) {
	fs.StringVar(&d.topic, "topic", "", "only dead events of this topic")
	fs.StringVar(&d.key, "key", "", "only dead events of this ordering key")
	fs.StringVar(&d.errorContains, "error", "", "only dead events whose last error contains this text, in any case (no wildcards)")
	fs.StringVar(&d.since, "since", "", "only dead events that died at or after this time (RFC 3339, YYYY-MM-DD, or an age such as 24h or 7d)")
	fs.StringVar(&d.until, "until", "", "only dead events that died before this time (same forms as --since)")
	if paging {
		fs.IntVar(&d.limit, "limit", defaultListLimit, fmt.Sprintf("most dead events listed (at most %d)", limits.DeadListLimit))
		fs.StringVar(&d.before, "before", "", "list the dead events after the one of this cursor (the next page: the CURSOR of the last one listed)")
	}
	if all {
		fs.BoolVar(&d.all, "all", false, "act on every dead event matching the filters instead of a list of ids")
	}
}

func (d *outboxFlags) filter(cmd string) (admin.DeadFilter, error) {
	f := admin.DeadFilter{View: admin.Outbox, Topic: d.topic, Key: d.key, ErrorContains: d.errorContains, Limit: d.limit, Before: d.before}
	// Checked here, before any connection: a topic or key no event can have is a typo, not an empty
	// result.
	if d.topic != "" {
		if err := textcheck.Check(d.topic, limits.TopicBytes, false); err != nil {
			return f, usagef(cmd, "--topic: %v", err)
		}
	}
	if err := textcheck.Check(d.key, limits.KeyBytes, true); err != nil {
		return f, usagef(cmd, "--key: %v", err)
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

func (d *outboxFlags) filtered() bool {
	return d.topic != "" || d.key != "" || d.errorContains != "" || d.since != "" || d.until != ""
}

func (d *outboxFlags) allScope() (bool, string) { return d.all, d.topic }

var outboxDeadListFlags outboxFlags

var outboxDeadList = &command{
	name:    "outbox dead list",
	summary: "list the outbox's dead events, newest first",
	details: `
Dead events are events no Publisher took: out of attempts, or refused with a permanent error. They
are kept until replayed or discarded (rotations never remove them). They are listed newest first,
by the time they died (then by id), as the console lists them for the same filters: --error matches
a substring of the last error in any case. When the list is full, more may follow: pass --before
with the CURSOR of the last one listed. With --json: an array of txinbox.DeadLetter (cursor, id,
event_id, topic, key, kind, content_type, died_at, attempts_started, attempts_failed, last_error);
'txinbox outbox dead show ID' shows every field of one.`,
	flags: func(fs *flag.FlagSet) {
		outboxDeadListFlags = outboxFlags{}
		outboxDeadListFlags.register(fs, true, false)
	},
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		const name = "outbox dead list"
		if len(args) > 0 {
			return usagef(name, "unexpected arguments: %s", strings.Join(args, " "))
		}
		f, err := outboxDeadListFlags.filter(name)
		if err != nil {
			return err
		}
		c, pool, err := a.client(name)
		if err != nil {
			return err
		}
		defer pool.Close()
		ls, err := c.ListDead(a.ctx, f)
		if err != nil {
			return err
		}
		if a.json {
			return a.writeJSON(ls) // never null: ListDead returns a non-nil slice
		}
		if len(ls) == 0 {
			fmt.Fprintf(a.stdout, "no dead outbox events\n")
			return nil
		}
		tw := a.table("ID", "TOPIC", "KIND", "KEY", "EVENT ID", "ATTEMPTS", "DIED", "LAST ERROR")
		for _, e := range ls {
			row(tw, e.ID, short(e.Topic, 30), short(e.Kind, 30), dash(short(e.Key, 30)), e.EventID, e.AttemptsStarted, when(e.DiedAt), short(e.LastError, 60))
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

var outboxDeadShow = &command{
	name:    "outbox dead show",
	args:    "ID | EVENT ID",
	summary: "show one outbox event (in any state) with every field",
	details: `
The event is named by its id in the outbox (the ID column of 'txinbox outbox dead list', a positive
integer) or by its event id (the EVENT ID column, a UUID: the CloudEvents id a consumer sees). The
state is pending, claimed (a relay holds it), sent or dead; the kind and content type are shown with
their defaults applied (the topic, application/json). With --json: the JSON of admin.OutboxEvent.`,
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		const name = "outbox dead show"
		if len(args) != 1 || strings.Contains(args[0], ",") {
			return usagef(name, "outbox dead show needs exactly one event id")
		}
		ids, eventIDs, err := parseIDArgs(name, "an event id", args, true)
		if err != nil {
			return err
		}
		c, pool, err := a.client(name)
		if err != nil {
			return err
		}
		defer pool.Close()
		var e admin.OutboxEvent
		if eventIDs[0] != "" {
			e, err = c.FindOutboxEvent(a.ctx, eventIDs[0])
		} else {
			e, err = c.GetOutboxEvent(a.ctx, ids[0])
		}
		if err != nil {
			return err
		}
		if a.json {
			return a.writeJSON(e)
		}
		return printOutboxEvent(a.stdout, e)
	},
}

func printOutboxEvent(w io.Writer, e admin.OutboxEvent) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	field := func(name string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", name, v) }
	field("id", e.ID)
	field("event id", e.EventID)
	field("topic", e.Topic)
	field("kind", e.Kind)
	field("content type", e.ContentType)
	field("key", dash(e.Key))
	field("state", e.State)
	field("attempts", fmt.Sprintf("%d started, %d failed", e.AttemptsStarted, e.AttemptsFailed))
	field("published", when(e.CreatedAt))
	field("next run", when(e.NextRunAt))
	field("started", when(e.StartedAt))
	switch e.State {
	case "dead":
		field("died", when(e.FinishedAt))
	case "sent":
		field("sent", when(e.FinishedAt))
	}
	field("owner", dash(e.Owner))
	field("lease until", when(e.LeaseUntil))
	field("token", e.Token)
	if len(e.Headers) > 0 {
		h, _ := json.Marshal(e.Headers)
		field("headers", string(h))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if e.LastError != "" {
		fmt.Fprintf(w, "last error:\n  %s\n", strings.ReplaceAll(strings.TrimRight(e.LastError, "\n"), "\n", "\n  "))
	}
	printHistory(w, e.History)
	fmt.Fprintf(w, "payload:\n%s\n", indentJSON(e.Payload))
	return nil
}

// outboxRows are the outbox's dead events, for outbox dead replay and outbox dead discard.
var outboxRows = bulkRows{view: admin.Outbox, group: "outbox dead", ids: "event ids", idWord: "an event id",
	byEventID: true, one: "dead event", counted: "dead outbox event(s)", scope: "topic",
	flags: func() bulkFlags { return &outboxFlags{limit: limits.DeadListLimit} },
}

var (
	outboxDeadReplay = bulkCommand(outboxRows, bulkSpec{verb: "replay", past: "replayed",
		summary: "put dead outbox events back to pending (same event id, attempts reset)",
		details: `
A replayed event keeps its event id (its idempotency key downstream), payload and last error, starts
again at attempt 1 and goes as soon as a relay claims it; an event with a key goes before the later
queued events of its key. Each ID is an event's id in the outbox (a positive integer) or its event
id (a UUID, the CloudEvents id a consumer sees); an event id that no stored event has fails the
command before anything is replayed. Exits 1 if a given id was not replayed.`,
		skipIDs: "not dead, or not found",
		skipAll: "no longer dead",
		do:      (*admin.Admin).ReplayDead,
	})
	outboxDeadDiscard = bulkCommand(outboxRows, bulkSpec{verb: "discard", past: "discarded", summary: "delete dead outbox events", details: `
A discarded event is deleted: it is never published. Each ID is an event's id in the outbox (a
positive integer) or its event id (a UUID, the CloudEvents id a consumer sees); an event id that no
stored event has fails the command before anything is discarded. --all without --topic needs --yes
(it spans every topic). --dry-run prints what would be discarded and changes nothing. Exits 1 if a
given id was not (with --dry-run: would not be) discarded.`,
		skipIDs: "not dead, or not found",
		skipAll: "no longer dead",
		guarded: true,
		do:      (*admin.Admin).DiscardDead,
		check:   (*admin.Admin).DeadAmong,
	})
)
