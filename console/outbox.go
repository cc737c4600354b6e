package console

import (
	"cmp"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/internal/textcheck"
)

// The outbox's pages: its events per topic, its dead events (filtered, with replay and discard as on
// the dead letters' page), and one event. Every figure and change is package admin's.

// ---- depth by topic ----

type outboxData struct {
	Topics []topicRow
}

// topicRow is one topic of the outbox page: admin's counts, and its pause if it is paused.
type topicRow struct {
	admin.OutboxTopicStats
	Paused *admin.Paused
}

func (h *handler) outboxOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	st, err := h.admin.OutboxStats(ctx)
	if err != nil {
		h.dbFail(w, r, "counting the outbox's events", err)
		return
	}
	ps, err := h.admin.ListPaused(ctx)
	if err != nil {
		h.dbFail(w, r, "reading what is paused", err)
		return
	}
	d := outboxData{Topics: make([]topicRow, len(st))}
	for i, t := range st {
		d.Topics[i] = topicRow{OutboxTopicStats: t, Paused: pausedOf(ps, admin.Outbox, t.Topic)}
	}
	h.render(w, r, http.StatusOK, "outbox", "Outbox", d)
}

// ---- dead events ----

// outboxFilter is the dead-event filter of a request: its own fields are topic and key.
type outboxFilter struct{ filterForm }

func parseOutboxFilter(v url.Values) (outboxFilter, error) {
	f, err := parseFilterForm(v, "topic", "key")
	return outboxFilter{f}, err
}

// Topic is the topic typed.
func (f outboxFilter) Topic() string { return f.own[0].Value }

// Key is the key typed.
func (f outboxFilter) Key() string { return f.own[1].Value }

// admin returns the filter as admin applies it, with the cursor before ("": none).
func (f outboxFilter) admin(before string) admin.DeadFilter {
	return admin.DeadFilter{View: admin.Outbox, Topic: f.Topic(), Key: f.Key(), ErrorContains: f.Error, Since: f.since, Until: f.until, Before: before}
}

type outboxDeadData struct {
	F        outboxFilter
	Rows     []txinbox.DeadLetter
	Before   string       // the page's start ("": newest)
	Older    template.URL // the query of the next page ("": no older page)
	Matching int64
}

func (h *handler) outboxDeadList(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	f, err := parseOutboxFilter(q)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	before, err := text("before", q.Get("before"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	lf := f.admin(before)
	lf.Limit = deadPageSize + 1 // one more: is there an older page?
	rows, err := h.admin.ListDead(ctx, lf)
	if badArgument(err) {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		h.dbFail(w, r, "listing the outbox's dead events", err)
		return
	}
	d := outboxDeadData{F: f, Before: before}
	if len(rows) > deadPageSize {
		rows = rows[:deadPageSize]
		v := f.values()
		v.Set("before", rows[len(rows)-1].Cursor)
		d.Older = template.URL(v.Encode()) //nolint:gosec // url.Values.Encode output
	}
	d.Rows = rows
	m, err := h.admin.CountDead(ctx, f.admin(""))
	if err != nil {
		h.dbFail(w, r, "counting the outbox's dead events", err)
		return
	}
	d.Matching = m.Matching
	h.render(w, r, http.StatusOK, "outbox_dead", "Dead outbox events", d)
}

// outboxDead are the outbox's dead events, for the actions on them.
func (h *handler) outboxDead() deadRows[outboxFilter] {
	return deadRows[outboxFilter]{view: admin.Outbox, path: "/outbox/dead", noun: "dead outbox events", one: "dead event", logged: "outbox events ",
		counting:  "counting the outbox's dead events",
		unchanged: "%d were no longer dead (replayed or discarded meanwhile): left alone.",
		gone:      "%d of the confirmed ones had left the dead events before the action.",
		parse:     parseOutboxFilter,
		snapshot: func(s string) error {
			if _, err := text("snapshot", s); err != nil {
				return err
			}
			if s == "" {
				return &inputError{"snapshot", "missing: confirm the action first"}
			}
			return nil
		},
	}
}

func (h *handler) outboxDeadConfirm(w http.ResponseWriter, r *http.Request) {
	h.outboxDead().confirm(h, w, r)
}

func (h *handler) outboxDeadApply(w http.ResponseWriter, r *http.Request) {
	h.outboxDead().apply(h, w, r)
}

// ---- one event ----

type outboxEventData struct {
	ID       string // the search
	NotFound string
	E        *outboxEventView
}

// outboxEventView is one outbox event, ready to display.
type outboxEventView struct {
	admin.OutboxEvent
	PayloadText string // indented JSON
	HeaderList  []header
}

func (h *handler) outboxEvent(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	d := outboxEventData{ID: r.URL.Query().Get("id")}
	if d.ID == "" {
		h.render(w, r, http.StatusOK, "outbox_event", "Find an outbox event", d)
		return
	}
	// The id typed: the event's id in the outbox, or its event id (the UUID a consumer sees).
	var e admin.OutboxEvent
	var err error
	var which string
	if id, perr := positive("id", d.ID); perr == nil {
		e, err = h.admin.GetOutboxEvent(ctx, id)
		which = "id " + strconv.FormatInt(id, 10)
	} else if textcheck.IsEventID(d.ID) {
		e, err = h.admin.FindOutboxEvent(ctx, d.ID)
		which = "event id " + d.ID
	} else {
		h.fail(w, r, http.StatusBadRequest, (&inputError{"id", strconv.Quote(d.ID) + " is neither an outbox event's id (a positive integer) nor its event id (a UUID)"}).Error())
		return
	}
	if errors.Is(err, admin.ErrNotFound) {
		d.NotFound = "No outbox event has " + which + " (never published, discarded, or sent and removed after the retention window)."
		h.render(w, r, http.StatusNotFound, "outbox_event", "Outbox event", d)
		return
	}
	if err != nil {
		h.dbFail(w, r, "reading the outbox event", err)
		return
	}
	v := &outboxEventView{OutboxEvent: e, PayloadText: prettyJSON(e.Payload)}
	for k, val := range e.Headers {
		v.HeaderList = append(v.HeaderList, header{Name: k, Value: val})
	}
	slices.SortFunc(v.HeaderList, func(a, b header) int { return cmp.Compare(a.Name, b.Name) })
	d.E = v
	h.render(w, r, http.StatusOK, "outbox_event", "Outbox event "+strconv.FormatInt(e.ID, 10), d)
}
