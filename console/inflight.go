package console

import (
	"html/template"
	"net/http"
	"net/url"

	"github.com/txinbox/txinbox/admin"
)

// inflightData is the page of queued work (admin.Admin.ListInFlight) of one View.
type inflightData struct {
	Outbox bool   // the View: the outbox's events, by topic; else the inbox's messages, by consumer
	Path   string // the page's path
	Name   string // the consumer or topic filter
	State  string // the state filter
	States []string
	Rows   []admin.InFlight
	Before string       // the page's start ("": newest)
	Query  template.URL // the filters' query
	Older  template.URL // the query of the next page ("": no older page)
}

// inflightList serves /inflight (messages, ?consumer=) and /outbox/inflight (events, ?topic=),
// each with ?state= and the ?before= cursor: read-only.
func (h *handler) inflightList(w http.ResponseWriter, r *http.Request) {
	h.inflight(w, r, admin.Inbox)
}

func (h *handler) outboxInflightList(w http.ResponseWriter, r *http.Request) {
	h.inflight(w, r, admin.Outbox)
}

func (h *handler) inflight(w http.ResponseWriter, r *http.Request, view admin.View) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	d := inflightData{Outbox: view == admin.Outbox, Path: "/inflight", States: []string{"pending", "retrying", "processing"}}
	field, title := "consumer", "Queued messages"
	if d.Outbox {
		d.Path, field, title = "/outbox/inflight", "topic", "Queued outbox events"
	}
	var err error
	for _, x := range []struct {
		dst  *string
		name string
	}{{&d.Name, field}, {&d.State, "state"}, {&d.Before, "before"}} {
		if *x.dst, err = text(x.name, q.Get(x.name)); err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
	}
	f := admin.InFlightFilter{View: view, State: d.State, Before: d.Before, Limit: deadPageSize + 1} // one more: is there an older page?
	if d.Outbox {
		f.Topic = d.Name
	} else {
		f.Consumer = d.Name
	}
	rows, err := h.admin.ListInFlight(ctx, f)
	if badArgument(err) {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		h.dbFail(w, r, "listing the queued work", err)
		return
	}
	v := url.Values{}
	if d.Name != "" {
		v.Set(field, d.Name)
	}
	if d.State != "" {
		v.Set("state", d.State)
	}
	d.Query = template.URL(v.Encode()) //nolint:gosec // url.Values.Encode output
	if len(rows) > deadPageSize {
		rows = rows[:deadPageSize]
		v.Set("before", rows[len(rows)-1].Cursor)
		d.Older = template.URL(v.Encode()) //nolint:gosec // url.Values.Encode output
	}
	d.Rows = rows
	h.render(w, r, http.StatusOK, "inflight", title, d)
}
