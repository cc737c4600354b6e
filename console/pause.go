package console

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/txinbox/txinbox/admin"
)

// Pausing and resuming a consumer or an outbox topic: a confirmation page (GET /pause/confirm, which
// asks for the reason of a pause) whose form posts to /pause/apply. Both go through admin's Pause and
// Resume.

// pauseData is the pause page: the action awaiting confirmation.
type pauseData struct {
	Op     string // "pause" or "resume"
	View   string // "inbox" or "outbox"
	What   string // "consumer" or "topic"
	Name   string
	Paused *admin.Paused // its pause, if it is paused
	Back   string
}

// pauseRequest reads op, view and name of a pause or resume from v.
func pauseRequest(v url.Values) (d pauseData, av admin.View, err error) {
	d.Op, d.View = v.Get("op"), v.Get("view")
	if d.Op != "pause" && d.Op != "resume" {
		return d, 0, &inputError{"op", "must be pause or resume"}
	}
	switch d.View {
	case "inbox":
		d.What, av, d.Back = "consumer", admin.Inbox, "/"
	case "outbox":
		d.What, av, d.Back = "topic", admin.Outbox, "/outbox"
	default:
		return d, 0, &inputError{"view", "must be inbox or outbox"}
	}
	if d.Name, err = text(d.What, v.Get("name")); err != nil {
		return d, 0, err
	}
	if d.Name == "" {
		return d, 0, &inputError{d.What, "required"}
	}
	return d, av, nil
}

// pausedOf returns the pause of name in v among ps, or nil.
func pausedOf(ps []admin.Paused, v admin.View, name string) *admin.Paused {
	for i := range ps {
		if ps[i].View == v && ps[i].Name == name {
			return &ps[i]
		}
	}
	return nil
}

func (h *handler) pauseConfirm(w http.ResponseWriter, r *http.Request) {
	d, av, err := pauseRequest(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	ps, err := h.admin.ListPaused(ctx)
	if err != nil {
		h.dbFail(w, r, "reading what is paused", err)
		return
	}
	d.Paused = pausedOf(ps, av, d.Name)
	h.render(w, r, http.StatusOK, "pause", capital(d.Op)+" "+d.What+" "+d.Name+"?", d)
}

func (h *handler) pauseApply(w http.ResponseWriter, r *http.Request) {
	v := r.PostForm
	d, av, err := pauseRequest(v)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	var changed bool
	if d.Op == "pause" {
		var reason string
		if reason, err = text("reason", v.Get("reason")); err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		by := "console"
		if u, _, ok := r.BasicAuth(); ok && u != "" {
			by = "console (" + u + ")"
		}
		changed, err = h.admin.Pause(ctx, av, d.Name, by, reason)
	} else {
		changed, err = h.admin.Resume(ctx, av, d.Name)
	}
	if err != nil {
		if badArgument(err) {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		h.dbFail(w, r, d.Op, err)
		return
	}
	h.log.Info("txinbox console: "+d.Op, d.What, d.Name, "changed", changed, "path", r.URL.Path, "remote", r.RemoteAddr)
	res := resultData{Back: d.Back}
	switch {
	case d.Op == "pause" && changed:
		res.Heading = fmt.Sprintf("Paused %s %s", d.What, d.Name)
		res.Lines = []string{"Nothing of it is claimed from each pool's or relay's next claim on; batches in flight finish."}
	case d.Op == "pause":
		res.Heading = fmt.Sprintf("%s %s was paused already", capital(d.What), d.Name)
		res.Lines = []string{"Its pause was left as it was."}
	case changed:
		res.Heading = fmt.Sprintf("Resumed %s %s", d.What, d.Name)
		res.Lines = []string{"Its queued work is claimed again, each at its own time."}
	default:
		res.Heading = fmt.Sprintf("%s %s was not paused", capital(d.What), d.Name)
		res.Lines = []string{"Nothing was changed."}
	}
	h.render(w, r, http.StatusOK, "result", res.Heading, res)
}
