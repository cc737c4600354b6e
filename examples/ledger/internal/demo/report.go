package demo

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
)

// Report is the outcome of a run.
type Report struct {
	opts Options
	tag  string

	StormDeliveries, ReplayDeliveries int
	StormDuration, DrainDuration      time.Duration
	ReplayDuration, ProcessDuration   time.Duration
	Duration                          time.Duration
	Drained                           bool
	DrainStall                        string // why the drain gave up, if it did

	UniqueEvents    int
	Accepted        int // 202 answers
	Duplicates      int // 200 answers (storm and replay)
	StormDuplicates int
	Invalid         int // 400 answers
	Conflicts       int // 422 answers to tampered events
	CreditRequests  int
	CreditsApplied  int // 201 answers not replayed
	CreditsReplayed int // 201 answers replayed
	CreditConflicts int // 422 answers to the tampered credit
	Unexpected      map[string]int
	ProducerRetries int64

	EventEntries, CreditEntries  int64
	CreditedCents, ExpectedCents int64
	Attempts, Retries            int64
	FailedAttempts, Unfinished   int64
	Dead                         int64
	DeadError                    string
	GuardHits                    int64 // completed messages whose event already had an entry

	Crash crashSummary

	Checks []Check
}

type crashSummary struct {
	Enabled     bool
	Killed      bool
	PID         int
	EventID     string
	Uncommitted int64
	Claims      int64
	Handled     int64
	Err         error
}

// Check is one invariant and whether it held.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// OK reports whether every check passed.
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

func (r *Report) check(ok bool, name, detail string, args ...any) {
	r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(detail, args...)})
}

// verify fills in the report's figures from the HTTP answers and the database, and checks every
// invariant.
func (r *run) verify(ctx context.Context, rep *Report, before, after totals) error {
	st := &r.stats
	rep.UniqueEvents = len(r.events)
	rep.ProducerRetries = st.retries.Load()
	rep.Unexpected = map[string]int{}
	expected := map[string]bool{
		"storm/event/202": true, "storm/event/200": true, "storm/invalid/400": true,
		"storm/credit/201": true, "storm/credit/201/replayed": true,
		"replay/event/200": true, "replay/conflict-event/422": true,
		"replay/credit/201/replayed": true, "replay/conflict-credit/422": true,
	}
	st.mu.Lock()
	for k, n := range st.answers {
		if !expected[k] {
			rep.Unexpected[k] = n
		}
	}
	st.mu.Unlock()
	rep.Accepted = st.get("storm/event/202")
	rep.StormDuplicates = st.get("storm/event/200")
	rep.Duplicates = rep.StormDuplicates + st.get("replay/event/200")
	rep.Invalid = st.get("storm/invalid/400")
	rep.Conflicts = st.get("replay/conflict-event/422")
	rep.CreditsApplied = st.get("storm/credit/201")
	rep.CreditsReplayed = st.get("storm/credit/201/replayed") + st.get("replay/credit/201/replayed")
	rep.CreditConflicts = st.get("replay/conflict-credit/422")
	for k, n := range st.answers {
		if strings.Contains(k, "/credit/") {
			rep.CreditRequests += n
		}
	}
	c := &r.crash
	c.mu.Lock()
	rep.Crash = crashSummary{Enabled: r.o.Crash, Killed: c.killed, PID: c.pid, EventID: c.eventID,
		Uncommitted: c.uncommitted, Claims: c.claims, Handled: c.handled, Err: c.err}
	c.mu.Unlock()

	// Expected ledger.
	poisonID := r.events[r.poison].ev.EventID
	wantEvents := map[string]ledger.OrderPaid{}
	wantBalance := map[string]int64{}
	for i, e := range r.events {
		if i == r.poison {
			continue
		}
		wantEvents[e.ev.EventID] = e.ev
		wantBalance[e.ev.AccountID] += e.ev.AmountCents
		rep.ExpectedCents += e.ev.AmountCents
	}
	wantCredits := map[string]credit{}
	for _, cr := range r.credits {
		wantCredits[cr.key] = cr
		wantBalance[cr.account] += cr.amount
		rep.ExpectedCents += cr.amount
	}

	// Actual ledger.
	rows, err := r.db.Query(ctx, r.q(`SELECT source, coalesce(event_id, ''), coalesce(idempotency_key, ''), account_id, amount_cents
		FROM {schema}.ledger_entries`))
	if err != nil {
		return err
	}
	var ev, cr tally
	seenEvents := map[string]bool{}
	seenCredits := map[string]bool{}
	var credited int64
	for rows.Next() {
		var src, eventID, key, account string
		var amount int64
		if err := rows.Scan(&src, &eventID, &key, &account, &amount); err != nil {
			rows.Close()
			return err
		}
		credited += amount
		switch ledger.Source(src) {
		case ledger.SourceEvent:
			rep.EventEntries++
			want, ok := wantEvents[eventID]
			ev.add(ok, seenEvents[eventID], ok && (want.AccountID != account || want.AmountCents != amount))
			seenEvents[eventID] = true
		case ledger.SourceCredit:
			rep.CreditEntries++
			want, ok := wantCredits[key]
			cr.add(ok, seenCredits[key], ok && (want.account != account || want.amount != amount))
			seenCredits[key] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rep.CreditedCents = credited
	ev.missing = missingKeys(seenEvents, wantEvents)
	cr.missing = missingKeys(seenCredits, wantCredits)

	// Inbox state.
	var pending, processing, completed, queued int64
	var deadKey, deadErr string
	err = r.db.QueryRow(ctx, r.q(`
SELECT count(*) FILTER (WHERE state = 'pending' AND id NOT IN (SELECT unnest(b.ids) FROM {schema}.inbox_batch b WHERE b.consumer = $1)),
       (SELECT coalesce(sum(cardinality(b.ids)), 0) FROM {schema}.inbox_batch b WHERE b.consumer = $1), -- processing: listed by a batch in flight
       count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'dead'),
       coalesce(sum(attempts_started), 0), coalesce(sum(attempts_failed), 0),
       coalesce(sum(attempts_started - attempts_failed - CASE WHEN state = 'completed' THEN 1 ELSE 0 END), 0),
       count(*) FILTER (WHERE state = 'completed' AND (result->>'already_applied')::boolean),
       coalesce(min(key) FILTER (WHERE state = 'dead'), ''), coalesce(min(last_error) FILTER (WHERE state = 'dead'), ''),
       (SELECT count(*) FROM {schema}.inbox_queue WHERE consumer = $1)
FROM {schema}.inbox WHERE consumer = $1`), ledger.Consumer).Scan(&pending, &processing, &completed, &rep.Dead,
		&rep.Attempts, &rep.FailedAttempts, &rep.Unfinished, &rep.GuardHits, &deadKey, &deadErr, &queued)
	if err != nil {
		return err
	}
	rep.Retries = rep.Attempts - pending - processing - completed - rep.Dead
	rep.DeadError = deadErr

	// Balances.
	var badAccounts int64
	err = r.db.QueryRow(ctx, r.q(`
SELECT count(*) FROM {schema}.accounts a
FULL JOIN (SELECT account_id, sum(amount_cents) AS total, count(*) AS n FROM {schema}.ledger_entries GROUP BY account_id) e
  ON e.account_id = a.account_id
WHERE a.account_id IS NULL OR e.account_id IS NULL OR a.balance_cents <> e.total OR a.entries <> e.n`)).Scan(&badAccounts)
	if err != nil {
		return err
	}
	balances := map[string]int64{}
	rows, err = r.db.Query(ctx, r.q(`SELECT account_id, balance_cents FROM {schema}.accounts`))
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			rows.Close()
			return err
		}
		balances[id] = b
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	wrongBalances := 0
	for id, want := range wantBalance {
		if balances[id] != want {
			wrongBalances++
		}
	}
	for id := range balances {
		if _, ok := wantBalance[id]; !ok {
			wrongBalances++
		}
	}

	// The checks.
	accepted, lost := 0, 0
	for i := range st.accepted {
		switch n := st.accepted[i].Load(); {
		case n == 1:
			accepted++
		case n == 0 && st.resent[i].Load():
			lost++ // its 202 was lost with the connection; the re-sent delivery got 200
		}
	}
	rep.check(accepted+lost == len(r.events), "every event accepted (202) exactly once over HTTP",
		"%s of %s events got exactly one 202 (%d more lost their answer to a transport error and were re-sent)",
		num(int64(accepted)), num(int64(len(r.events))), lost)
	rep.check(ev.ok() && rep.EventEntries == int64(len(wantEvents)), "every non-poison event credited exactly once",
		"%s event entries for %s expected; %s", num(rep.EventEntries), num(int64(len(wantEvents))), ev)
	rep.check(cr.ok() && rep.CreditEntries == int64(len(r.credits)), "every credit (Idempotency-Key) applied exactly once",
		"%s credit entries for %s keys sent %s times; %s", num(rep.CreditEntries), num(int64(len(r.credits))),
		num(int64(rep.CreditRequests)), cr)
	rep.check(credited == rep.ExpectedCents, "total credited matches the expected sum",
		"%s credited, %s expected", money(credited), money(rep.ExpectedCents))
	rep.check(!seenEvents[poisonID] && rep.Dead == 1 && deadKey == poisonID, "the poison event is a dead letter, never credited",
		"%d dead (%s), after %d attempts", rep.Dead, deadKey, r.o.MaxAttempts)
	rep.check(rep.Drained && pending == 0 && processing == 0 && queued == 0, "nothing pending or processing at the end",
		"pending %d, processing %d, queued %d, completed %s%s", pending, processing, queued, num(completed), cond(rep.DrainStall != "", "; "+rep.DrainStall))
	rep.check(badAccounts == 0 && wrongBalances == 0, "every balance equals the sum of its entries and the expected balance",
		"%d accounts; %d differ from their entries, %d from the expected balance", len(balances), badAccounts, wrongBalances)
	rep.check(before == after, "the replay changed nothing",
		"entries %s -> %s, sum %s -> %s", num(before.entries), num(after.entries), money(before.sum), money(after.sum))
	rep.check(rep.Accepted+lost == len(r.events) && rep.Invalid == r.o.Invalid && rep.Conflicts == r.o.Conflicts &&
		rep.CreditConflicts == min(1, len(r.credits)) && len(rep.Unexpected) == 0 && st.failed.Load() == 0,
		"every HTTP answer as expected (202 new, 200 duplicate, 400 invalid, 422 reused id, 201 credit)",
		"unexpected answers: %v; deliveries given up: %d", rep.Unexpected, st.failed.Load())
	rep.check(rep.GuardHits == 0, "the ledger's UNIQUE event_id never had to stop a duplicate",
		"%d completed messages found their entry already there", rep.GuardHits)
	if r.o.Crash {
		detail := fmt.Sprintf("%d attempts never finished and were run again", rep.Unfinished)
		if rep.Crash.Err != nil {
			detail = rep.Crash.Err.Error()
		}
		rep.check(rep.Crash.Killed && rep.Crash.Claims > 0 && rep.Unfinished > 0, "the worker crash happened mid-batch and was recovered", "%s", detail)
	}
	return nil
}

// tally counts the entries of one source that differ from the expected ledger.
type tally struct{ missing, extra, doubled, wrong int }

func (t *tally) add(expected, seen, wrong bool) {
	switch {
	case !expected:
		t.extra++
	case seen:
		t.doubled++
	case wrong:
		t.wrong++
	}
}

func (t tally) ok() bool { return t == tally{} }

func (t tally) String() string {
	return fmt.Sprintf("missing %d, unexpected %d, doubled %d, wrong account or amount %d", t.missing, t.extra, t.doubled, t.wrong)
}

// missingKeys counts the expected keys not seen.
func missingKeys[T any](seen map[string]bool, want map[string]T) int {
	n := 0
	for k := range want {
		if !seen[k] {
			n++
		}
	}
	return n
}

// Print writes the summary table.
func (r *Report) Print(w io.Writer) {
	o := r.opts
	line := strings.Repeat("─", 78)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(w, "  %-22s %s\n", name, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(w, "\n%s\n  txinbox ledger demo: summary\n%s\n", line, line)
	row("database", "%s, schema %s", o.Database, o.Schema)
	row("seed", "%d (--seed %d reproduces the stream)", o.Seed, o.Seed)
	row("events", "%s unique OrderPaid (1 poison) over %s accounts", num(int64(r.UniqueEvents)), num(int64(o.Accounts)))
	row("deliveries", "%s in the storm (each event 1-%d times, shuffled, %d keep-alive producers) + %s replayed",
		num(int64(r.StormDeliveries)), o.MaxCopies, o.Producers, num(int64(r.ReplayDeliveries)))
	row("  202 accepted", "%s", num(int64(r.Accepted)))
	row("  200 duplicate", "%s duplicates rejected (%s in the storm, %s in the replay)", num(int64(r.Duplicates)),
		num(int64(r.StormDuplicates)), num(int64(r.Duplicates-r.StormDuplicates)))
	row("  400 invalid body", "%d", r.Invalid)
	row("  422 reused event_id", "%d (tampered events in the replay)", r.Conflicts)
	if o.Credits > 0 {
		row("credits (Idem.-Key)", "%s keys, %s requests: %s applied, %s replayed from the store, %d reused key (422)",
			num(int64(o.Credits)), num(int64(r.CreditRequests)), num(int64(r.CreditsApplied)), num(int64(r.CreditsReplayed)), r.CreditConflicts)
	}
	row("ledger entries", "%s from events + %s from credits", num(r.EventEntries), num(r.CreditEntries))
	row("total credited", "%s (expected %s)", money(r.CreditedCents), money(r.ExpectedCents))
	row("retries", "%s (%s failed attempts: ~%g%% transient + poison; %s attempts cut by the crash)",
		num(r.Retries), num(r.FailedAttempts), o.FailPercent, num(r.Unfinished))
	dead := r.DeadError
	if len(dead) > 90 {
		dead = dead[:90] + "..."
	}
	row("dead letters", "%d (%q)", r.Dead, dead)
	if o.Crash {
		c := r.Crash
		if c.Killed {
			row("worker crash", "child process `ledger work` (pid %d) SIGKILLed after %d messages, while its", c.PID, c.Handled)
			row("", "handler hung in a batch holding %d claims, %d entries written, uncommitted;", c.Claims, c.Uncommitted)
			row("", "its messages were taken over after the %v lease and run again", o.Lease)
		} else {
			row("worker crash", "NOT DONE: %v", c.Err)
		}
	}
	row("producer re-sends", "%s (409 in flight / 503 / transport errors)", num(r.ProducerRetries))
	row("duration", "%s total: storm %s, drain %s, replay %s", secs(r.Duration), secs(r.StormDuration), secs(r.DrainDuration), secs(r.ReplayDuration))
	row("throughput", "%s deliveries/s in the storm, %s/s in the replay", rate(r.StormDeliveries, r.StormDuration), rate(r.ReplayDeliveries, r.ReplayDuration))
	row("", "%s events credited in %s from the first delivery (%s/s, crash recovery included)",
		num(r.EventEntries), secs(r.ProcessDuration), rate(int(r.EventEntries), r.ProcessDuration))
	fmt.Fprintf(w, "%s\n  checks\n", line)
	for _, c := range r.Checks {
		mark := "PASS"
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %s\n        %s\n", mark, c.Name, c.Detail)
	}
	verdict := "ALL INVARIANTS HOLD"
	if !r.OK() {
		verdict = "SOME INVARIANTS FAILED"
	}
	fmt.Fprintf(w, "%s\n  %s\n%s\n", line, verdict, line)
}

// num formats n with thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func money(cents int64) string { return "$" + num(cents/100) + fmt.Sprintf(".%02d", cents%100) }

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func rate(n int, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return num(int64(float64(n) / d.Seconds()))
}

// cond returns s if ok, else "".
func cond(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}
