package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os/user"
	"strings"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
)

// The pause commands: pause consumer|topic NAME, resume consumer|topic NAME, paused.

var pauseFlags struct {
	by, reason string
}

// pauseWhat is the View a "pause" or "resume" sub-command names.
var pauseWhat = map[string]admin.View{"consumer": admin.Inbox, "topic": admin.Outbox}

// pauseJSON is the JSON output of pause and resume.
type pauseJSON struct {
	View    string `json:"view"` // "inbox" or "outbox"
	Name    string `json:"name"`
	Changed bool   `json:"changed"` // false: it was paused already (pause), or was not paused (resume)
}

func viewName(v admin.View) string {
	if v == admin.Outbox {
		return "outbox"
	}
	return "inbox"
}

func newPauseCmd(what string) *command {
	v := pauseWhat[what]
	who := "worker pool of the consumer, in any process,"
	if v == admin.Outbox {
		who = "outbox relay of the schema, in any process,"
	}
	name := "pause " + what
	return &command{
		name:    name,
		args:    strings.ToUpper(what),
		summary: fmt.Sprintf("pause a %s: nothing of it is claimed until 'txinbox resume %s'", what, what),
		details: fmt.Sprintf(`
No %s claims its work from its next claim on (within its poll interval). What is queued stays as
it is: no attempt is charged, no retry time moved, nothing lost; batches in flight finish. The
pause is stored in the schema with who paused (--by, default the operating system's user name)
and why (--reason). Exits 1 if the %s was paused already (its record is left as it was).

With --json: {"view", "name", "changed"}.`, who, what),
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&pauseFlags.by, "by", "", "who pauses (default: the operating system's user name)")
			fs.StringVar(&pauseFlags.reason, "reason", "", "why (shown by 'txinbox paused' and the console)")
		},
		run: func(a *app, fs *flag.FlagSet, args []string) error {
			if len(args) != 1 {
				return usagef(name, "want one %s, got %d arguments", what, len(args))
			}
			by := pauseFlags.by
			if by == "" {
				if u, err := user.Current(); err == nil {
					by = u.Username
				}
				by = cmp.Or(by, a.getenv("USER"), "txinbox command")
			}
			c, pool, err := a.client(name)
			if err != nil {
				return err
			}
			defer pool.Close()
			ok, err := c.Pause(a.ctx, v, args[0], by, pauseFlags.reason)
			if err != nil {
				return usageIfArgument(name, err)
			}
			return a.reportPause(v, what, args[0], ok, "paused", "was paused already: see 'txinbox paused'")
		},
	}
}

// reportPause writes what a pause or resume of what name did: its JSON, or "WHAT NAME done" when it
// changed something. When it changed nothing, it returns the error "WHAT NAME unchanged" (exit 1).
func (a *app) reportPause(v admin.View, what, name string, changed bool, done, unchanged string) error {
	if a.json {
		if err := a.writeJSON(pauseJSON{View: viewName(v), Name: name, Changed: changed}); err != nil {
			return err
		}
	} else if changed {
		fmt.Fprintf(a.stdout, "%s %s %s\n", what, name, done)
	}
	if !changed {
		return fmt.Errorf("%s %s %s", what, name, unchanged)
	}
	return nil
}

func newResumeCmd(what string) *command {
	v := pauseWhat[what]
	name := "resume " + what
	return &command{
		name:    name,
		args:    strings.ToUpper(what),
		summary: fmt.Sprintf("resume a %s that 'txinbox pause %s' paused", what, what),
		details: fmt.Sprintf(`
Deletes the pause and wakes the %s with a notification: its queued work is claimed at once, each
at its own time (its not-before or retry time, or now if that has passed). Exits 1 if the %s
was not paused.

With --json: {"view", "name", "changed"}.`, map[admin.View]string{admin.Inbox: "consumer's worker pools", admin.Outbox: "outbox relays"}[v], what),
		run: func(a *app, fs *flag.FlagSet, args []string) error {
			if len(args) != 1 {
				return usagef(name, "want one %s, got %d arguments", what, len(args))
			}
			c, pool, err := a.client(name)
			if err != nil {
				return err
			}
			defer pool.Close()
			ok, err := c.Resume(a.ctx, v, args[0])
			if err != nil {
				return usageIfArgument(name, err)
			}
			return a.reportPause(v, what, args[0], ok, "resumed", "was not paused")
		},
	}
}

// pausedJSON is one row of paused --json.
type pausedJSON struct {
	View string `json:"view"` // "inbox" (a consumer) or "outbox" (a topic)
	admin.Paused
}

var pausedCmd = &command{
	name:    "paused",
	summary: "list the paused consumers and outbox topics, with who paused them, when and why",
	details: `
Columns: WHAT consumer (inbox) or topic (outbox); NAME; SINCE when it was paused (the database's
clock); BY who paused it; REASON.

With --json: an array of {"view", "name", "paused_by", "paused_at", "reason"} (admin.Paused).`,
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("paused", "unexpected arguments: %s", strings.Join(args, " "))
		}
		c, pool, err := a.client("paused")
		if err != nil {
			return err
		}
		defer pool.Close()
		ps, err := c.ListPaused(a.ctx)
		if err != nil {
			return err
		}
		if a.json {
			out := make([]pausedJSON, len(ps))
			for i, p := range ps {
				out[i] = pausedJSON{View: viewName(p.View), Paused: p}
			}
			return a.writeJSON(out)
		}
		if len(ps) == 0 {
			fmt.Fprintf(a.stdout, "nothing paused in schema %s\n", a.schema)
			return nil
		}
		tw := a.table("WHAT", "NAME", "SINCE", "BY", "REASON")
		for _, p := range ps {
			what := "consumer"
			if p.View == admin.Outbox {
				what = "topic"
			}
			row(tw, what, p.Name, p.At.UTC().Format(time.RFC3339), p.By, p.Reason)
		}
		return tw.Flush()
	},
}

// usageIfArgument makes an *txinbox.ArgumentError of admin (a bad name, --by or --reason) a usage
// error of cmd: exit status 2, nothing written.
func usageIfArgument(cmd string, err error) error {
	var ae *txinbox.ArgumentError
	if errors.As(err, &ae) {
		return usagef(cmd, "%v", err)
	}
	return err
}
