package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/txinbox/txinbox/admin"
)

// The outbox's pages: its events per topic, its dead events (filtered, with replay and discard as on
// the dead letters' page), and one event. Every figure and change is package admin's.

// ---- depth by topic ----

type outboxData struct {
	Topics []admin.OutboxTopicStats
}

func (h *handler) outboxOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	st, err := h.admin.OutboxStats(ctx)
	if err != nil {
		h.dbFail(w, r, "counting the outbox's events", err)
		return
	}
	h.render(w, r, http.StatusOK, "outbox", "Outbox", outboxData{Topics: st})
}

// ---- dead events ----

// outboxFilter is the dead-event filter of a request, as typed (for the form) and parsed.
type outboxFilter struct {
	Topic, Key, Error, Since, Until string
	since, until                    time.Time
}

func parseOutboxFilter(v url.Values) (outboxFilter, error) {
	f := outboxFilter{Topic: v.Get("topic"), Key: v.Get("key"), Error: v.Get("error"), Since: v.Get("since"), Until: v.Get("until")}
	for _, x := range []struct{ name, v string }{{"topic", f.Topic}, {"key", f.Key}, {"error", f.Error}} {
		if _, err := text(x.name, x.v); err != nil {
			return f, err
		}
	}
	var err error
	if f.since, err = parseTime("since", f.Since); err != nil {
		return f, err
	}
	if f.until, err = parseTime("until", f.Until); err != nil {
		return f, err
	}
	if !f.since.IsZero() && !f.until.IsZero() && !f.until.After(f.since) {
		return f, &inputError{"until", "must be after since"}
	}
	return f, nil
}

// values returns the filter as query values (empty ones left out).
func (f outboxFilter) values() url.Values {
	v := url.Values{}
	for k, x := range map[string]string{"topic": f.Topic, "key": f.Key, "error": f.Error, "since": f.Since, "until": f.Until} {
		if x != "" {
			v.Set(k, x)
		}
	}
	return v
}

// Query is the filter as a URL query string (already encoded: the templates insert it as is).
func (f outboxFilter) Query() template.URL { return template.URL(f.values().Encode()) } //nolint:gosec // url.Values.Encode output

// Fields lists the filter's non-empty fields, for hidden form inputs and descriptions.
func (f outboxFilter) Fields() []header {
	var out []header
	for _, k := range []string{"topic", "key", "error", "since", "until"} {
		if x := f.values().Get(k); x != "" {
			out = append(out, header{Name: k, Value: x})
		}
	}
	return out
}

// admin returns the filter as admin applies it, with the cursor before ("": none).
func (f outboxFilter) admin(before string) admin.OutboxDeadFilter {
	return admin.OutboxDeadFilter{Topic: f.Topic, Key: f.Key, ErrorContains: f.Error, Since: f.since, Until: f.until, Before: before}
}

type outboxDeadData struct {
	F        outboxFilter
	Rows     []admin.OutboxDeadEvent
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
	lf.Limit = DeadPageSize + 1 // one more: is there an older page?
	rows, err := h.admin.ListOutboxDead(ctx, lf)
	if badArgument(err) {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		h.dbFail(w, r, "listing the outbox's dead events", err)
		return
	}
	d := outboxDeadData{F: f, Before: before}
	if len(rows) > DeadPageSize {
		rows = rows[:DeadPageSize]
		v := f.values()
		v.Set("before", rows[len(rows)-1].Cursor)
		d.Older = template.URL(v.Encode()) //nolint:gosec // url.Values.Encode output
	}
	d.Rows = rows
	m, err := h.admin.CountOutboxDead(ctx, f.admin(""))
	if err != nil {
		h.dbFail(w, r, "counting the outbox's dead events", err)
		return
	}
	d.Matching = m.Matching
	h.render(w, r, http.StatusOK, "outbox_dead", "Dead outbox events", d)
}

func (h *handler) outboxDeadConfirm(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	d := confirmData{Action: "/outbox/dead/apply", Op: q.Get("op"), Scope: q.Get("scope")}
	if !h.outboxConfirmData(ctx, w, r, q, &d) {
		return
	}
	h.render(w, r, http.StatusOK, "confirm", d.Verb+" dead outbox events?", d)
}

// outboxConfirmData fills d for an action on dead outbox events from the values v; false when it has
// written an error page.
func (h *handler) outboxConfirmData(ctx context.Context, w http.ResponseWriter, r *http.Request, v url.Values, d *confirmData) bool {
	d.Noun = "dead outbox events"
	switch d.Op {
	case "replay":
		d.Verb = "Replay"
	case "discard":
		d.Verb = "Discard"
	default:
		h.fail(w, r, http.StatusBadRequest, "op: must be replay or discard")
		return false
	}
	f, err := parseOutboxFilter(v)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return false
	}
	d.Filter = f.Fields()
	d.Back = "/outbox/dead?" + string(f.Query())
	switch d.Scope {
	case "selected":
		sel, err := ids("id", v["id"])
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return false
		}
		if len(sel) == 0 {
			h.fail(w, r, http.StatusBadRequest, "no dead event selected: tick the ones to act on")
			return false
		}
		now, err := h.admin.OutboxDeadAmong(ctx, sel...)
		if err != nil {
			h.dbFail(w, r, "reading the selection", err)
			return false
		}
		d.IDs, d.Count, d.Asked = now, int64(len(now)), len(sel)
	case "filter":
		m, err := h.admin.CountOutboxDead(ctx, f.admin(""))
		if err != nil {
			h.dbFail(w, r, "counting the outbox's dead events", err)
			return false
		}
		d.Count, d.Cursor, d.TooMany = m.Matching, m.Before, m.Matching > MaxBulk
	default:
		h.fail(w, r, http.StatusBadRequest, "scope: must be selected or filter")
		return false
	}
	return true
}

func (h *handler) outboxDeadApply(w http.ResponseWriter, r *http.Request) {
	v := r.PostForm
	d := confirmData{Action: "/outbox/dead/apply", Op: v.Get("op"), Scope: v.Get("scope")}
	f, err := parseOutboxFilter(v)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	confirmed, err := strconv.ParseInt(v.Get("count"), 10, 64)
	if err != nil || confirmed < 0 {
		h.fail(w, r, http.StatusBadRequest, "count: the confirmed count is missing: confirm the action first")
		return
	}
	act := h.admin.ReplayOutboxDead
	verb, done := "Replay", "replayed"
	switch d.Op {
	case "replay":
	case "discard":
		act, verb, done = h.admin.DiscardOutboxDead, "Discard", "discarded"
	default:
		h.fail(w, r, http.StatusBadRequest, "op: must be replay or discard")
		return
	}
	var targets []int64
	switch d.Scope {
	case "selected":
		if targets, err = ids("id", v["id"]); err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if int64(len(targets)) != confirmed {
			h.fail(w, r, http.StatusBadRequest, "count: does not match the ids sent: confirm the action again")
			return
		}
	case "filter":
		snapshot, err := text("snapshot", v.Get("snapshot"))
		if err == nil && snapshot == "" {
			err = &inputError{"snapshot", "missing: confirm the action first"}
		}
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		ctx, cancel := h.ctx(r)
		targets, err = h.admin.OutboxDeadIDs(ctx, f.admin(snapshot), int(min(confirmed, MaxBulk)+1))
		cancel()
		if badArgument(err) {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if err != nil {
			h.dbFail(w, r, "selecting the dead outbox events", err)
			return
		}
		if int64(len(targets)) > confirmed {
			// More match than the operator saw: change nothing, show the new count.
			ctx, cancel := h.ctx(r)
			defer cancel()
			if !h.outboxConfirmData(ctx, w, r, v, &d) {
				return
			}
			d.Changed = fmt.Sprintf("More dead outbox events match than the %d you confirmed: nothing was changed. Confirm again:", confirmed)
			h.render(w, r, http.StatusConflict, "confirm", verb+" dead outbox events?", d)
			return
		}
	default:
		h.fail(w, r, http.StatusBadRequest, "scope: must be selected or filter")
		return
	}
	var changed []int64
	for chunk := range slices.Chunk(targets, maxAdminIDs) {
		ctx, cancel := h.ctx(r)
		got, err := act(ctx, chunk...)
		cancel()
		if err != nil {
			h.logAction(r, "outbox events "+done, len(changed), len(targets))
			if badArgument(err) {
				h.fail(w, r, http.StatusBadRequest, err.Error())
				return
			}
			h.dbFail(w, r, fmt.Sprintf("%s (after %d %s)", verb, len(changed), done), err)
			return
		}
		changed = append(changed, got...)
	}
	h.logAction(r, "outbox events "+done, len(changed), len(targets))
	res := resultData{Heading: fmt.Sprintf("%s %d dead outbox events", capital(done), len(changed)), Back: "/outbox/dead?" + string(f.Query())}
	res.Lines = append(res.Lines, fmt.Sprintf("Confirmed: %d. %s: %d.", confirmed, capital(done), len(changed)))
	if n := len(targets) - len(changed); n > 0 {
		res.Lines = append(res.Lines, fmt.Sprintf("%d were no longer dead (replayed or discarded meanwhile): left alone.", n))
	}
	if n := confirmed - int64(len(targets)); d.Scope == "filter" && n > 0 {
		res.Lines = append(res.Lines, fmt.Sprintf("%d of the confirmed ones had left the dead events before the action.", n))
	}
	h.render(w, r, http.StatusOK, "result", res.Heading, res)
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
	id, err := positive("id", d.ID)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	e, err := h.admin.GetOutboxEvent(ctx, id)
	if errors.Is(err, admin.ErrNotFound) {
		d.NotFound = fmt.Sprintf("No outbox event has id %d (never published, discarded, or sent and removed after the retention window).", id)
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
