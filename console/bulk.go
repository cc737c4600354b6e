package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
)

// The dead letters' and the outbox's dead events' pages share their filter form and their actions
// (replay and discard, of a selection or of every row a filter matches, confirmed then applied);
// deadRows holds what they differ in.

// ---- filter ----

// filterForm is a dead list's filter, as typed (for the form) and parsed: the list's two own
// fields (consumer and kind, or topic and key), the error text and the time range of death.
type filterForm struct {
	own                 [2]header // the own fields' names and values, as typed
	Error, Since, Until string
	since, until        time.Time
}

// parseFilterForm reads the filter from v, with the own fields named own1 and own2.
func parseFilterForm(v url.Values, own1, own2 string) (filterForm, error) {
	f := filterForm{own: [2]header{{own1, v.Get(own1)}, {own2, v.Get(own2)}}, Error: v.Get("error"), Since: v.Get("since"), Until: v.Get("until")}
	for _, x := range []header{f.own[0], f.own[1], {"error", f.Error}} {
		if _, err := text(x.Name, x.Value); err != nil {
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

// Fields lists the filter's non-empty fields in the form's order, for hidden form inputs and
// descriptions.
func (f filterForm) Fields() []header {
	var out []header
	for _, x := range []header{f.own[0], f.own[1], {"error", f.Error}, {"since", f.Since}, {"until", f.Until}} {
		if x.Value != "" {
			out = append(out, x)
		}
	}
	return out
}

// values returns the filter as query values (empty ones left out).
func (f filterForm) values() url.Values {
	v := url.Values{}
	for _, x := range f.Fields() {
		v.Set(x.Name, x.Value)
	}
	return v
}

// Query is the filter as a URL query string (already encoded: the templates insert it as is).
func (f filterForm) Query() template.URL { return template.URL(f.values().Encode()) } //nolint:gosec // url.Values.Encode output

// ---- actions ----

// rowFilter is a dead list's filter (deadFilter, outboxFilter) as its actions use it.
type rowFilter interface {
	Fields() []header
	Query() template.URL
	// admin returns the filter as admin applies it, with the cursor before ("": none).
	admin(before string) admin.DeadFilter
}

// deadRows is what the actions on the dead letters and on the outbox's dead events differ in: their
// admin.View, their words, their pages and their filter F.
type deadRows[F rowFilter] struct {
	view     admin.View
	path     string // the list's page: "/dead", "/outbox/dead"; the actions' are path+"/apply"
	noun     string // the rows: "dead letters", "dead outbox events"
	one      string // one row, in the error of an empty selection: "dead letter", "dead event"
	logged   string // put before the action's past ("replayed") in the log: "", "outbox events "
	counting string // what failed when count fails: "counting dead letters", ...
	// unchanged and gone are the result's lines (with a count) about the rows given but not
	// changed, and about the confirmed rows no longer matching at the action.
	unchanged, gone string
	parse           func(url.Values) (F, error)
	// snapshot returns an *inputError when s is not the bound of a confirmation (confirmData.Snapshot).
	snapshot func(s string) error
}

// count counts the rows f matches now and sets d's bound to them (d.Snapshot: admin's
// DeadCount.Before).
func (p deadRows[F]) count(ctx context.Context, h *handler, f F, d *confirmData) (int64, error) {
	m, err := h.admin.CountDead(ctx, f.admin(""))
	d.Snapshot = m.Before
	return m.Matching, err
}

// ids returns up to limit ids of the rows f matches within the bound snapshot (as confirmed: an
// *inputError when it is not one).
func (p deadRows[F]) ids(ctx context.Context, h *handler, f F, snapshot string, limit int) ([]int64, error) {
	if err := p.snapshot(snapshot); err != nil {
		return nil, err
	}
	ids, err := h.admin.DeadIDs(ctx, f.admin(snapshot), limit)
	var bad *txinbox.ArgumentError
	if errors.As(err, &bad) && bad.Name == "Before" {
		// The snapshot is the filter's Before: name it as the form does.
		return nil, &inputError{"snapshot", strconv.Quote(snapshot) + " is not the snapshot of a confirmation: confirm the action again"}
	}
	return ids, err
}

// confirm renders the confirmation of an action on the rows.
func (p deadRows[F]) confirm(h *handler, w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	d := confirmData{Action: p.path + "/apply", Op: q.Get("op"), Scope: q.Get("scope")}
	if !p.confirmData(ctx, h, w, r, q, &d) {
		return
	}
	h.render(w, r, http.StatusOK, "confirm", d.Verb+" "+p.noun+"?", d)
}

// confirmData fills d for an action on the rows from the values v; false when it has written an
// error page.
func (p deadRows[F]) confirmData(ctx context.Context, h *handler, w http.ResponseWriter, r *http.Request, v url.Values, d *confirmData) bool {
	switch d.Op {
	case "replay":
		d.Verb = "Replay"
	case "discard":
		d.Verb = "Discard"
	default:
		h.fail(w, r, http.StatusBadRequest, "op: must be replay or discard")
		return false
	}
	f, err := p.parse(v)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return false
	}
	d.Noun, d.One, d.Filter = p.noun, strings.TrimSuffix(p.noun, "s"), f.Fields()
	d.Back = p.path + "?" + string(f.Query())
	switch d.Scope {
	case "selected":
		sel, err := ids("id", v["id"])
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return false
		}
		if len(sel) == 0 {
			h.fail(w, r, http.StatusBadRequest, "no "+p.one+" selected: tick the ones to act on")
			return false
		}
		now, err := h.admin.DeadAmong(ctx, p.view, sel...)
		if err != nil {
			h.dbFail(w, r, "reading the selection", err)
			return false
		}
		d.IDs, d.Count, d.Asked = now, int64(len(now)), len(sel)
	case "filter":
		n, err := p.count(ctx, h, f, d)
		if err != nil {
			h.dbFail(w, r, p.counting, err)
			return false
		}
		d.Count, d.TooMany = n, n > maxBulk
	default:
		h.fail(w, r, http.StatusBadRequest, "scope: must be selected or filter")
		return false
	}
	return true
}

// apply applies a confirmed action on the rows (a POST: ServeHTTP has checked its CSRF token).
func (p deadRows[F]) apply(h *handler, w http.ResponseWriter, r *http.Request) {
	v := r.PostForm
	d := confirmData{Action: p.path + "/apply", Op: v.Get("op"), Scope: v.Get("scope")}
	f, err := p.parse(v)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	confirmed, err := strconv.ParseInt(v.Get("count"), 10, 64)
	if err != nil || confirmed < 0 {
		h.fail(w, r, http.StatusBadRequest, "count: the confirmed count is missing: confirm the action first")
		return
	}
	act := h.admin.ReplayDead
	verb, done := "Replay", "replayed"
	switch d.Op {
	case "replay":
	case "discard":
		act, verb, done = h.admin.DiscardDead, "Discard", "discarded"
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
		ctx, cancel := h.ctx(r)
		targets, err = p.ids(ctx, h, f, v.Get("snapshot"), int(min(confirmed, maxBulk)+1))
		cancel()
		var bad *inputError
		if errors.As(err, &bad) || badArgument(err) {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if err != nil {
			h.dbFail(w, r, "selecting the "+p.noun, err)
			return
		}
		if int64(len(targets)) > confirmed {
			// More match than the operator saw: change nothing, show the new count.
			ctx, cancel := h.ctx(r)
			defer cancel()
			if !p.confirmData(ctx, h, w, r, v, &d) {
				return
			}
			d.Changed = fmt.Sprintf("More %s match than the %d you confirmed: nothing was changed. Confirm again:", p.noun, confirmed)
			h.render(w, r, http.StatusConflict, "confirm", verb+" "+p.noun+"?", d)
			return
		}
	default:
		h.fail(w, r, http.StatusBadRequest, "scope: must be selected or filter")
		return
	}
	var changed []int64
	for chunk := range slices.Chunk(targets, maxAdminIDs) {
		ctx, cancel := h.ctx(r)
		got, err := act(ctx, p.view, chunk...)
		cancel()
		if err != nil {
			h.logAction(r, p.logged+done, len(changed), len(targets))
			if badArgument(err) {
				h.fail(w, r, http.StatusBadRequest, err.Error())
				return
			}
			h.dbFail(w, r, fmt.Sprintf("%s (after %d %s)", verb, len(changed), done), err)
			return
		}
		changed = append(changed, got...)
	}
	h.logAction(r, p.logged+done, len(changed), len(targets))
	res := resultData{Heading: fmt.Sprintf("%s %d %s", capital(done), len(changed), p.noun), Back: p.path + "?" + string(f.Query())}
	res.Lines = append(res.Lines, fmt.Sprintf("Confirmed: %d. %s: %d.", confirmed, capital(done), len(changed)))
	if n := len(targets) - len(changed); n > 0 {
		res.Lines = append(res.Lines, fmt.Sprintf(p.unchanged, n))
	}
	if n := confirmed - int64(len(targets)); d.Scope == "filter" && n > 0 {
		res.Lines = append(res.Lines, fmt.Sprintf(p.gone, n))
	}
	h.render(w, r, http.StatusOK, "result", res.Heading, res)
}
