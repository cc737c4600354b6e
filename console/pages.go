package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
)

// ---- overview ----

// consumerRow is one consumer of the overview: admin's counts, and the sums of its last hour.
type consumerRow struct {
	admin.ConsumerOverview
	Completed1h, Failed1h, DiedIn1h int64
	Chart                           chart
	Paused                          *admin.Paused // its pause, if it is paused
}

type horizon struct {
	SessionXminAge     int64
	OldestXact         time.Duration
	Holder             string // the session holding the oldest snapshot: pid, application, state
	SlotXminAge        int64
	FrozenXidAge       int64
	TooOld, SlotTooOld bool
}

type overviewData struct {
	Consumers    []consumerRow
	Truncated    bool
	MaxConsumers int // when Truncated: the most consumers admin's Overview lists
	Tables       []admin.TableHealth
	Horizon      horizon
	ChartMinutes int
	Paused       []admin.Paused // every pause: consumers, then outbox topics
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	d, err := h.loadOverview(ctx)
	if err != nil {
		h.dbFail(w, r, "reading the overview", err)
		return
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// loadOverview presents admin's Overview and Health.
func (h *handler) loadOverview(ctx context.Context) (overviewData, error) {
	d := overviewData{ChartMinutes: chartMinutes}
	o, err := h.admin.Overview(ctx, chartMinutes)
	if err != nil {
		return d, err
	}
	d.Truncated, d.MaxConsumers = o.Truncated, len(o.Consumers) // truncated: as many as it lists
	if d.Paused, err = h.admin.ListPaused(ctx); err != nil {
		return d, err
	}
	now := time.Now()
	for _, c := range o.Consumers {
		x := consumerRow{ConsumerOverview: c, Chart: newChart(c.Consumer, c.Minutes, now, chartMinutes),
			Paused: pausedOf(d.Paused, admin.Inbox, c.Consumer)}
		for _, m := range c.Minutes {
			x.Completed1h += m.Completed
			x.Failed1h += m.Failed
			x.DiedIn1h += m.Dead
		}
		d.Consumers = append(d.Consumers, x)
	}
	hl, err := h.admin.Health(ctx)
	if err != nil {
		return d, err
	}
	d.Tables = hl.Tables
	d.Horizon = newHorizon(hl.Horizon)
	return d, nil
}

// newHorizon is what the overview shows of hz.
func newHorizon(hz admin.Horizon) horizon {
	d := horizon{SlotXminAge: hz.SlotXminAge, FrozenXidAge: hz.FrozenXidAge}
	if x := hz.Holder; x != nil {
		d.SessionXminAge, d.OldestXact = x.XminAge, x.Age
		d.Holder = fmt.Sprintf("pid %d, %s", x.PID, x.BackendType)
		if x.ApplicationName != "" {
			d.Holder += ", application " + x.ApplicationName
		}
		if x.State != "" {
			d.Holder += ", " + x.State
		}
	}
	d.TooOld = d.OldestXact > 10*time.Minute
	d.SlotTooOld = d.SlotXminAge > 1_000_000
	return d
}

// ---- message ----

type header struct{ Name, Value string }

// messageView is one stored message, ready to display.
type messageView struct {
	ID                              int64
	Consumer, Key, Kind, State      string
	OrderingKey                     string
	AttemptsStarted, AttemptsFailed int
	Owner                           string
	Token                           int64
	LastError                       string
	Fingerprint                     string
	// UpstreamEventID and UpstreamSource name the event the message was delivered as (admin.Upstream):
	// another service's database, so not a link.
	UpstreamEventID, UpstreamSource   string
	NextRunAt, LeaseUntil, ReceivedAt time.Time
	StartedAt, CompletedAt, ExpiresAt time.Time
	Payload, Result                   string // indented JSON
	Raw                               string // hex dump of an undecodable message
	Undecodable                       bool
	Headers                           []header
	History                           []txinbox.Attempt // the last failed attempts, oldest first
}

type messageData struct {
	Consumer, Key, ID string // the search
	Searched          bool
	NotFound          string
	M                 *messageView
}

func (h *handler) message(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	d := messageData{Consumer: q.Get("consumer"), Key: q.Get("key"), ID: q.Get("id")}
	var id int64
	switch {
	case d.ID != "":
		n, err := positive("id", d.ID)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		id = n
	case d.Consumer != "" || d.Key != "":
		if _, err := text("consumer", d.Consumer); err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if _, err := text("key", d.Key); err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if d.Consumer == "" || d.Key == "" {
			h.fail(w, r, http.StatusBadRequest, "give both a consumer and a key, or an id")
			return
		}
		m, err := h.admin.FindMessage(ctx, d.Consumer, d.Key)
		if errors.Is(err, admin.ErrNotFound) {
			d.Searched, d.NotFound = true, fmt.Sprintf("No message of consumer %q has key %q (never received, or deleted: discarded, purged, or cleaned after its dedup window).", d.Consumer, d.Key)
			h.render(w, r, http.StatusNotFound, "message", "Message", d)
			return
		}
		if err != nil {
			h.dbFail(w, r, "looking up the key", err)
			return
		}
		h.showMessage(w, r, d, m)
		return
	default:
		h.render(w, r, http.StatusOK, "message", "Find a message", d)
		return
	}
	m, err := h.admin.GetMessage(ctx, id)
	if errors.Is(err, admin.ErrNotFound) {
		d.Searched = true
		d.NotFound = fmt.Sprintf("No message has id %d (never stored, or deleted).", id)
		h.render(w, r, http.StatusNotFound, "message", "Message", d)
		return
	}
	if err != nil {
		h.dbFail(w, r, "reading the message", err)
		return
	}
	h.showMessage(w, r, d, m)
}

// showMessage renders the page of the message m, found by the search d.
func (h *handler) showMessage(w http.ResponseWriter, r *http.Request, d messageData, m inbox.StoredMessage) {
	v := newMessageView(m)
	d.Searched, d.M = true, &v
	h.render(w, r, http.StatusOK, "message", "Message "+strconv.FormatInt(m.ID, 10), d)
}

// ---- dead letters ----

// deadFilter is the dead-letter filter of a request: its own fields are consumer and kind.
type deadFilter struct{ filterForm }

func parseDeadFilter(v url.Values) (deadFilter, error) {
	f, err := parseFilterForm(v, "consumer", "kind")
	return deadFilter{f}, err
}

// Consumer is the consumer typed.
func (f deadFilter) Consumer() string { return f.own[0].Value }

// Kind is the kind typed.
func (f deadFilter) Kind() string { return f.own[1].Value }

// admin returns the filter as admin applies it, with the cursor before ("": none).
func (f deadFilter) admin(before string) admin.DeadFilter {
	return admin.DeadFilter{View: admin.Inbox, Consumer: f.Consumer(), Kind: f.Kind(), ErrorContains: f.Error, Since: f.since, Until: f.until, Before: before}
}

type deadData struct {
	F          deadFilter
	Rows       []txinbox.DeadLetter
	Before     int64  // the page's start (0: newest)
	NextBefore string // the cursor of the next page ("": no older page)
	Matching   int64
}

func (h *handler) deadList(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	f, err := parseDeadFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	before, err := optPositive("before", r.URL.Query().Get("before"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	lf := f.admin("")
	if before > 0 {
		lf.Before = strconv.FormatInt(before, 10) // an inbox letter's cursor is its seq
	}
	lf.Limit = deadPageSize + 1 // one more: is there an older page?
	rows, err := h.admin.ListDead(ctx, lf)
	if badArgument(err) {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		h.dbFail(w, r, "listing dead letters", err)
		return
	}
	d := deadData{F: f, Before: before}
	if len(rows) > deadPageSize {
		rows = rows[:deadPageSize]
		d.NextBefore = rows[len(rows)-1].Cursor
	}
	d.Rows = rows
	m, err := h.admin.CountDead(ctx, f.admin(""))
	if err != nil {
		h.dbFail(w, r, "counting dead letters", err)
		return
	}
	d.Matching = m.Matching
	h.render(w, r, http.StatusOK, "dead", "Dead letters", d)
}

// confirmData describes an action awaiting confirmation.
type confirmData struct {
	Action   string // form action path
	Verb     string // "Replay", "Discard"
	Op       string // "replay", "discard"
	Scope    string // "selected", "filter", "pending"
	Noun     string // what the action changes: "dead letters", "dead outbox events"
	One      string // Noun of one: "dead letter", "dead outbox event"
	Count    int64  // messages the action will change now
	Snapshot string // the bound: DeadCount.Before (dead letters, dead outbox events) or UnclaimedCount.MaxID (pending)
	IDs      []int64
	Filter   []header // the filter's fields
	Consumer string
	Asked    int // ids selected
	TooMany  bool
	Back     string
	Changed  string // set when an apply found the set changed
}

// deadLetters are the dead letters, for the actions on them.
func (h *handler) deadLetters() deadRows[deadFilter] {
	return deadRows[deadFilter]{view: admin.Inbox, path: "/dead", noun: "dead letters", one: "dead letter", counting: "counting dead letters",
		unchanged: "%d were no longer dead (replayed or discarded meanwhile) or, for a replay, stored undecodable (discard those): left alone.",
		gone:      "%d of the confirmed ones had left the dead letters before the action.",
		parse:     parseDeadFilter,
		snapshot: func(s string) error {
			_, err := positive("snapshot", s) // an inbox letter's cursor is its seq
			return err
		},
	}
}

func (h *handler) deadConfirm(w http.ResponseWriter, r *http.Request) {
	h.deadLetters().confirm(h, w, r)
}

func (h *handler) deadApply(w http.ResponseWriter, r *http.Request) { h.deadLetters().apply(h, w, r) }

type resultData struct {
	Heading string
	Lines   []string
	Back    string
}

func (h *handler) logAction(r *http.Request, done string, n, of int) {
	h.log.Info("txinbox console: "+done, "messages", n, "of", of, "path", r.URL.Path, "remote", r.RemoteAddr)
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// ---- pending messages of a retired consumer ----

func (h *handler) pendingConfirm(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	d := confirmData{Action: "/pending/apply", Verb: "Discard", Op: "discard", Scope: "pending", Back: "/"}
	if !h.pendingConfirmData(ctx, w, r, r.URL.Query().Get("consumer"), &d) {
		return
	}
	h.render(w, r, http.StatusOK, "confirm", "Discard pending messages?", d)
}

func (h *handler) pendingConfirmData(ctx context.Context, w http.ResponseWriter, r *http.Request, consumer string, d *confirmData) bool {
	if _, err := text("consumer", consumer); err != nil || consumer == "" {
		h.fail(w, r, http.StatusBadRequest, "consumer: required (valid UTF-8 without NUL)")
		return false
	}
	m, err := h.admin.CountUnclaimed(ctx, consumer)
	if err != nil {
		h.dbFail(w, r, "counting pending messages", err)
		return false
	}
	d.Consumer, d.Count, d.TooMany = consumer, m.Matching, m.Matching > maxBulk
	if m.MaxID > 0 {
		d.Snapshot = strconv.FormatInt(m.MaxID, 10)
	}
	return true
}

func (h *handler) pendingApply(w http.ResponseWriter, r *http.Request) {
	v := r.PostForm
	consumer := v.Get("consumer")
	if _, err := text("consumer", consumer); err != nil || consumer == "" {
		h.fail(w, r, http.StatusBadRequest, "consumer: required (valid UTF-8 without NUL)")
		return
	}
	confirmed, err := strconv.ParseInt(v.Get("count"), 10, 64)
	if err != nil || confirmed < 0 {
		h.fail(w, r, http.StatusBadRequest, "count: the confirmed count is missing: confirm the action first")
		return
	}
	snapshot, err := positive("snapshot", v.Get("snapshot"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.ctx(r)
	targets, err := h.admin.UnclaimedIDs(ctx, consumer, snapshot, int(min(confirmed, maxBulk)+1))
	cancel()
	if err != nil {
		h.dbFail(w, r, "selecting the pending messages", err)
		return
	}
	if int64(len(targets)) > confirmed {
		ctx, cancel := h.ctx(r)
		defer cancel()
		d := confirmData{Action: "/pending/apply", Verb: "Discard", Op: "discard", Scope: "pending", Back: "/"}
		if !h.pendingConfirmData(ctx, w, r, consumer, &d) {
			return
		}
		d.Changed = fmt.Sprintf("More pending messages match than the %d you confirmed: nothing was changed. Confirm again:", confirmed)
		h.render(w, r, http.StatusConflict, "confirm", "Discard pending messages?", d)
		return
	}
	var discarded, claimed int
	for chunk := range slices.Chunk(targets, maxAdminIDs) {
		ctx, cancel := h.ctx(r)
		res, err := h.admin.DiscardPending(ctx, admin.PendingFilter{Consumer: consumer, IDs: chunk})
		dis, cl := res.Discarded, res.Claimed
		cancel()
		if err != nil {
			h.logAction(r, "discarded pending", discarded, len(targets))
			if badArgument(err) {
				h.fail(w, r, http.StatusBadRequest, err.Error())
				return
			}
			h.dbFail(w, r, fmt.Sprintf("discarding (after %d discarded)", discarded), err)
			return
		}
		discarded, claimed = discarded+len(dis), claimed+len(cl)
	}
	h.logAction(r, "discarded pending", discarded, len(targets))
	res := resultData{Heading: fmt.Sprintf("Discarded %d pending messages of %s", discarded, consumer), Back: "/"}
	res.Lines = append(res.Lines, fmt.Sprintf("Confirmed: %d. Discarded: %d.", confirmed, discarded))
	if claimed > 0 {
		res.Lines = append(res.Lines, fmt.Sprintf("%d were claimed by a worker at that moment: left alone.", claimed))
	}
	if n := len(targets) - discarded - claimed; n > 0 {
		res.Lines = append(res.Lines, fmt.Sprintf("%d had completed, died or been discarded meanwhile.", n))
	}
	h.render(w, r, http.StatusOK, "result", res.Heading, res)
}

// badArgument reports whether err is an invalid argument of an administration call.
func badArgument(err error) bool { return errors.Is(err, txinbox.ErrInvalidArgument) }
