package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
)

// ---- inflight list, outbox inflight list ----

// inflightFlags are the filters of the queued work of one view.
type inflightFlags struct {
	view          admin.View
	name          string // the consumer (Inbox) or topic (Outbox)
	state, before string
	limit         int
}

func (d *inflightFlags) register(fs *flag.FlagSet) {
	if d.view == admin.Outbox {
		fs.StringVar(&d.name, "topic", "", "only events of this topic")
	} else {
		fs.StringVar(&d.name, "consumer", "", "only messages of this consumer")
	}
	fs.StringVar(&d.state, "state", "", "only those in this state: pending, retrying or processing")
	fs.IntVar(&d.limit, "limit", defaultListLimit, fmt.Sprintf("most listed (at most %d)", limits.DeadListLimit))
	fs.StringVar(&d.before, "before", "", "list those queued before the one of this cursor (the next page: the CURSOR of the last one listed)")
}

func (d *inflightFlags) filter(cmd string) (admin.InFlightFilter, error) {
	f := admin.InFlightFilter{View: d.view, State: d.state, Limit: d.limit, Before: d.before}
	// Checked here, before any connection: a name no message or event can have is a typo, not an
	// empty result.
	if d.view == admin.Outbox {
		f.Topic = d.name
		if d.name != "" {
			if err := textcheck.Check(d.name, limits.TopicBytes, false); err != nil {
				return f, usagef(cmd, "--topic: %v", err)
			}
		}
	} else {
		f.Consumer = d.name
		if d.name != "" {
			if err := txinbox.ValidateName(d.name); err != nil {
				return f, usagef(cmd, "--consumer: %v", err)
			}
		}
	}
	switch d.state {
	case "", "pending", "retrying", "processing":
	default:
		return f, usagef(cmd, "--state must be pending, retrying or processing, not %q", d.state)
	}
	if d.limit < 1 || d.limit > limits.DeadListLimit {
		return f, usagef(cmd, "--limit must be between 1 and %d", limits.DeadListLimit)
	}
	if n, err := strconv.ParseInt(d.before, 10, 64); d.before != "" && (err != nil || n <= 0) {
		return f, usagef(cmd, "--before must be a CURSOR (a positive number) from a previous list")
	}
	return f, nil
}

var inflightListFlags, outboxInflightListFlags inflightFlags

// inflightCommand is inflight list (Inbox) or outbox inflight list (Outbox).
func inflightCommand(view admin.View) *command {
	name, flags, what, by, show := "inflight list", &inflightListFlags, "messages", "consumer", "txinbox dead show ID"
	if view == admin.Outbox {
		name, flags, what, by, show = "outbox inflight list", &outboxInflightListFlags, "events", "topic", "txinbox outbox dead show ID"
	}
	return &command{
		name:    name,
		summary: fmt.Sprintf("list the queued %s (pending, retrying, processing), newest first", what),
		details: fmt.Sprintf(`
Lists the %[1]s still queued, by %[2]s (--%[2]s) and state (--state), newest first (by id), as the
console lists them: STATE pending (waiting, never claimed), retrying (waiting, claimed before: an
attempt failed or never finished, or it was replayed) or processing (held by a worker or relay now:
OWNER, since STARTED); NEXT RUN the earliest time of the next attempt of one waiting; LAST ERROR the
error of its latest failed attempt. These are the PENDING, RETRYING and CLAIMED counts of the stats
and the console's overview. When the list is full, more may follow: pass --before with the CURSOR of
the last one listed. '%[3]s' shows every field of one, with its attempt history: its last 10 failed
attempts (time, duration, reason, error, owner). With --json: an array of admin.InFlight (cursor,
id, ...).`, what, by, show),
		flags: func(fs *flag.FlagSet) { *flags = inflightFlags{view: view}; flags.register(fs) },
		run: func(a *app, fs *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return usagef(name, "unexpected arguments: %s", strings.Join(args, " "))
			}
			f, err := flags.filter(name)
			if err != nil {
				return err
			}
			c, pool, err := a.client(name)
			if err != nil {
				return err
			}
			defer pool.Close()
			ls, err := c.ListInFlight(a.ctx, f)
			if err != nil {
				return err
			}
			if a.json {
				return a.writeJSON(ls) // never null: ListInFlight returns a non-nil slice
			}
			if len(ls) == 0 {
				fmt.Fprintf(a.stdout, "no queued %s\n", what)
				return nil
			}
			col := "CONSUMER"
			if view == admin.Outbox {
				col = "TOPIC"
			}
			tw := a.table("CURSOR", "ID", col, "KIND", "KEY", "STATE", "ATTEMPTS", "NEXT RUN", "OWNER", "STARTED", "LAST ERROR")
			for _, l := range ls {
				row(tw, l.Cursor, l.ID, l.Consumer+l.Topic, l.Kind, short(dash(l.Key), 40), l.State,
					fmt.Sprintf("%d/%d", l.AttemptsFailed, l.AttemptsStarted), when(l.NextRunAt), dash(l.Owner),
					when(l.StartedAt), short(dash(firstLine(l.LastError)), 60))
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
}

var (
	inflightList       = inflightCommand(admin.Inbox)
	outboxInflightList = inflightCommand(admin.Outbox)
)

// firstLine is s up to its first line break (a panic's error holds its stack).
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// printHistory writes a message's or event's attempt history, oldest first (nothing when empty).
func printHistory(w io.Writer, h []txinbox.Attempt) {
	if len(h) == 0 {
		return
	}
	fmt.Fprintf(w, "failed attempts (the last %d kept, oldest first):\n", 10)
	for _, at := range h {
		took := "-"
		if at.Duration > 0 {
			took = at.Duration.Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "  #%d  %s  took %s  %s  by %s\n    %s\n", at.Number, when(at.StartedAt), took, at.Reason,
			dash(at.Owner), strings.ReplaceAll(strings.TrimRight(at.Error, "\n"), "\n", "\n    "))
	}
}
