package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// kill marks messages dead as the worker would (queue row deleted, three failed attempts, died at
// diedAt).
func kill(t *testing.T, db *testdb.DB, lastError string, diedAt time.Time, ids ...int64) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = ANY($1))
		UPDATE {schema}.inbox SET state = 'dead', attempts_started = 3, attempts_failed = 3, last_error = $2,
			completed_at = $3, token = 3
		WHERE id = ANY($1)`), ids, lastError, diedAt)
	if err != nil {
		t.Fatal(err)
	}
}

func TestGetMessage(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	r, err := c.Receive(ctx, inbox.Message{Consumer: "ledger", Key: "k", Kind: "OrderPaid", Payload: []byte(`{"b": 2, "a": 1}`),
		Headers: map[string]string{"traceparent": "00-abc"}, OrderingKey: "order-7"})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.Complete(t, db, time.Hour, r.ID)
	m, err := c.GetMessage(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != r.ID || m.Consumer != "ledger" || m.Key != "k" || m.Kind != "OrderPaid" || string(m.Payload) != `{"a": 1, "b": 2}` ||
		m.Headers["traceparent"] != "00-abc" || m.OrderingKey != "order-7" || m.State != inbox.StateCompleted ||
		m.AttemptsStarted != 1 || len(m.Fingerprint) != 32 || m.ReceivedAt.IsZero() || m.CompletedAt.IsZero() ||
		!m.ExpiresAt.After(m.CompletedAt) || string(m.Result) != `{"ok": true}` || m.Raw != nil {
		t.Fatalf("stored message: %+v", m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if _, ok := back["lease_until"]; ok || back["state"] != "completed" || back["payload"].(map[string]any)["a"] != 1.0 {
		t.Errorf("JSON form: %s", b)
	}

	_, err = c.GetMessage(ctx, 999999)
	var nf *admin.NotFoundError
	if !errors.Is(err, admin.ErrNotFound) || !errors.As(err, &nf) || nf.ID != 999999 {
		t.Fatalf("unknown id: err = %v, want a *NotFoundError", err)
	}
}

func TestReplayDead(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "dead", "pending")
	kill(t, db, "boom", time.Now(), ids[0])
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, err := c.ReceiveUndecodableTx(ctx, tx, inbox.Undecodable{Consumer: "ledger", Raw: []byte("not json"), Reason: "invalid JSON"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	done, err := c.ReplayDead(ctx, admin.Inbox, ids[0], ids[1], u.ID, 424242)
	if err != nil || !slices.Equal(done, []int64{ids[0]}) {
		t.Fatalf("replay: %v, %v; want only %d", done, err, ids[0])
	}
	m, err := c.GetMessage(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if m.State != inbox.StatePending || m.AttemptsStarted != 0 || m.AttemptsFailed != 0 || m.LastError != "boom" ||
		!m.CompletedAt.IsZero() || m.Key != "dead" {
		t.Fatalf("replayed message: %+v", m)
	}
	// Queued to run now, with the message's fencing token.
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue q JOIN {schema}.inbox m USING (id, consumer)
		WHERE id = $1 AND q.token = m.token AND q.run_at <= now()`, ids[0]); got != 1 {
		t.Fatal("replayed message not queued")
	}
	// Still deduplicated: the key is the same row.
	if r, err := c.Receive(ctx, ledgertest.Message("dead", `{"amount":1}`)); err != nil || r.Outcome != inbox.Duplicate || r.ID != ids[0] {
		t.Fatalf("redelivery of a replayed key: %+v, %v", r, err)
	}
	// A second replay finds nothing dead.
	if done, err := c.ReplayDead(ctx, admin.Inbox, ids[0]); err != nil || len(done) != 0 {
		t.Fatalf("second replay: %v, %v", done, err)
	}
	if done, err := c.ReplayDead(ctx, admin.Inbox); err != nil || done != nil {
		t.Fatalf("empty replay: %v, %v", done, err)
	}
	if _, err := c.ReplayDead(ctx, admin.Inbox, 0); !errors.Is(err, txinbox.ErrInvalidArgument) {
		t.Fatalf("bad id: err = %v", err)
	}
	if _, err := c.ReplayDead(ctx, admin.Inbox, make([]int64, limits.AdminIDs+1)...); !errors.Is(err, txinbox.ErrInvalidArgument) {
		t.Fatalf("too many ids: err = %v", err)
	}
}

func TestReplayDeadCompletesOnce(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	var failing atomic.Bool
	failing.Store(true)
	ledgertest.StartWorker(t, db, &failing)
	id := ledgertest.Receive(t, c, "k")[0]
	ledgertest.WaitFor(t, "the message to die", func() bool {
		m, err := c.GetMessage(ctx, id)
		return err == nil && m.State == inbox.StateDead
	})
	dead, err := c.ListDead(ctx, admin.DeadFilter{ErrorContains: "ledger closed"})
	if err != nil || len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("dead letters: %+v, %v", dead, err)
	}

	failing.Store(false)
	if done, err := c.ReplayDead(ctx, admin.Inbox, id); err != nil || len(done) != 1 {
		t.Fatalf("replay: %v, %v", done, err)
	}
	ledgertest.WaitFor(t, "the replayed message to complete", func() bool {
		m, err := c.GetMessage(ctx, id)
		return err == nil && m.State == inbox.StateCompleted
	})
	if got := db.Count(t, `SELECT coalesce(sum(runs), 0) FROM {schema}.counts`); got != 1 {
		t.Fatalf("effect applied %d times, want once", got)
	}
	m, _ := c.GetMessage(ctx, id)
	if m.AttemptsStarted != 1 || m.ExpiresAt.IsZero() {
		t.Errorf("completed replay: %+v", m)
	}
	if r, err := c.Receive(ctx, ledgertest.Message("k", `{"amount":1}`)); err != nil || r.Outcome != inbox.Duplicate || r.State != inbox.StateCompleted {
		t.Fatalf("redelivery after the replay: %+v, %v", r, err)
	}
	if got := db.Count(t, `SELECT coalesce(sum(runs), 0) FROM {schema}.counts`); got != 1 {
		t.Fatalf("effect applied %d times, want once", got)
	}
}

func TestReplayDeadWakesWorkers(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := ledgertest.Receive(t, c, "k")[0]
	kill(t, db, "boom", time.Now(), id)
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{(txinbox.Store{Schema: db.Schema}).NotifyChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if done, err := c.ReplayDead(ctx, admin.Inbox, id); err != nil || len(done) != 1 {
		t.Fatalf("replay: %v, %v", done, err)
	}
	n, err := conn.Conn().WaitForNotification(ctx)
	if err != nil || n.Payload != "ledger" {
		t.Fatalf("notification: %+v, %v", n, err)
	}
	if _, err := conn.Exec(ctx, "UNLISTEN *"); err != nil {
		t.Fatal(err)
	}
}

func TestDiscardDead(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "a", "b")
	kill(t, db, "boom", time.Now(), ids[0])
	done, err := c.DiscardDead(ctx, admin.Inbox, ids[0], ids[1])
	if err != nil || !slices.Equal(done, []int64{ids[0]}) {
		t.Fatalf("discard: %v, %v", done, err)
	}
	if _, err := c.GetMessage(ctx, ids[0]); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("discarded message still there: %v", err)
	}
	if m, err := c.GetMessage(ctx, ids[1]); err != nil || m.State != inbox.StatePending {
		t.Fatalf("pending message touched: %+v, %v", m, err)
	}
	// The key is free again.
	if r, err := c.Receive(ctx, ledgertest.Message("a", `{"amount":1}`)); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("discarded key: %+v, %v", r, err)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	if s, err := c.Stats(ctx); err != nil || len(s) != 0 {
		t.Fatalf("empty stats: %+v, %v", s, err)
	}
	ids := ledgertest.Receive(t, c, ledgertest.Keys("k", 10)...)
	// k-0..1 pending (k-0 due for an hour), k-2 processing, k-3..5 completed (k-5 expired), k-6..7 dead.
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox SET next_run_at = now() - interval '1 hour' WHERE id = $1`), ids[0]); err != nil {
		t.Fatal(err)
	}
	// Claimed as a worker's batch claims (migration 00011): listed in a batch row.
	if _, err := db.Pool.Exec(ctx, db.SQL(`INSERT INTO {schema}.inbox_batch (consumer, xid, ids, owner)
		VALUES ('ledger', '1', ARRAY[$1::bigint], 'w1')`), ids[2]); err != nil {
		t.Fatal(err)
	}
	ledgertest.Complete(t, db, time.Hour, ids[3], ids[4])
	ledgertest.Complete(t, db, -time.Hour, ids[5])
	kill(t, db, "boom", time.Now(), ids[6], ids[7])
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox SET completed_at = now() - interval '1 hour' WHERE id = $1`), ids[4]); err != nil {
		t.Fatal(err)
	}
	// k-8, k-9 are delayed: pending, not due.
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox SET next_run_at = now() + interval '1 hour' WHERE id = ANY($1)`), ids[8:]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Receive(ctx, inbox.Message{Consumer: "audit", Key: "x", Kind: "Audit", Payload: []byte(`{}`),
		NotBefore: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	s, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0].Consumer != "audit" || s[1].Consumer != "ledger" {
		t.Fatalf("stats: %+v", s)
	}
	if a := s[0]; a.Pending != 1 || a.OldestPendingAge != 0 || a.Completed != 0 {
		t.Errorf("audit: %+v (a message not yet due has no age)", a)
	}
	l := s[1]
	if l.Pending != 4 || l.Processing != 1 || l.Completed != 3 || l.Expired != 1 || l.Dead != 2 || l.CompletedLastMinute != 2 {
		t.Errorf("ledger: %+v", l)
	}
	if l.OldestPendingAge < 59*time.Minute || l.OldestPendingAge > 24*time.Hour {
		t.Errorf("oldest pending age = %v, want about an hour", l.OldestPendingAge)
	}
}

func TestDiscardOlder(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	keys := ledgertest.Keys("old", 2500) // more than two batches
	old := ledgertest.Receive(t, c, keys...)
	ledgertest.Complete(t, db, 7*24*time.Hour, old...)
	fresh := ledgertest.Receive(t, c, "fresh", "dead-old", "pending")
	ledgertest.Complete(t, db, 7*24*time.Hour, fresh[0])
	kill(t, db, "boom", time.Now().Add(-48*time.Hour), fresh[1])
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox SET completed_at = now() - interval '2 days'
		WHERE key LIKE 'old-%'`)); err != nil {
		t.Fatal(err)
	}

	d, err := c.DiscardOlder(ctx, admin.OlderFilter{OlderThan: 24 * time.Hour})
	if n := d.Discarded; err != nil || n != 2500 {
		t.Fatalf("purge completed: %d, %v; want 2500", n, err)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 3 {
		t.Fatalf("rows left = %d, want fresh, dead-old and pending", got)
	}
	if d, err := c.DiscardOlder(ctx, admin.OlderFilter{OlderThan: 72 * time.Hour, States: []inbox.State{inbox.StateDead}}); err != nil || d.Discarded != 0 {
		t.Fatalf("purge dead older than 3 days: %d, %v", d.Discarded, err)
	}
	if d, err := c.DiscardOlder(ctx, admin.OlderFilter{OlderThan: 24 * time.Hour, States: []inbox.State{inbox.StateDead, inbox.StateCompleted}}); err != nil || d.Discarded != 1 {
		t.Fatalf("purge dead: %d, %v", d.Discarded, err)
	}
	// Purged keys are accepted again as new messages.
	if r, err := c.Receive(ctx, ledgertest.Message("old-7", `{"amount":1}`)); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("purged key: %+v, %v", r, err)
	}
	if d, err := c.DiscardOlder(ctx, admin.OlderFilter{OlderThan: 0, States: []inbox.State{inbox.StatePending}}); !errors.Is(err, txinbox.ErrInvalidArgument) || d.Discarded != 0 {
		t.Fatalf("purge pending: %d, %v; want ErrInvalidArgument", d.Discarded, err)
	}
	if _, err := c.DiscardOlder(ctx, admin.OlderFilter{OlderThan: -time.Second}); !errors.Is(err, txinbox.ErrInvalidArgument) {
		t.Fatalf("negative age: %v", err)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key IN ('fresh', 'pending')`); got != 2 {
		t.Fatalf("fresh or pending rows purged")
	}
}

// pendingRows is the number of inbox rows and queue rows of ids.
func pendingRows(t *testing.T, db *testdb.DB, ids ...int64) (inboxRows, queueRows int64) {
	t.Helper()
	return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE id = ANY($1)`, ids),
		db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue WHERE id = ANY($1)`, ids)
}

// claim claims up to limit ready messages of consumer as a worker's batch does, and returns their
// ids; the batch stays in flight (its transaction open, its row listing them) until t ends.
func claim(t *testing.T, db *testdb.DB, consumer string, limit int) []int64 {
	t.Helper()
	tx, err := db.Pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	ids, err := claimBatch(db, tx, consumer, limit)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A claim writes nothing until its batch's finish (migration 00011): GetMessage and Stats read the
// batch row that lists it, so a claimed message is processing, with its batch's owner and start, and
// its token and attempts unchanged until the finish.
func TestGetMessageAndStatsOfAClaim(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "claimed", "waiting")
	if got := claim(t, db, "ledger", 1); !slices.Equal(got, ids[:1]) {
		t.Fatalf("claim: %v", got)
	}
	m, err := c.GetMessage(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if m.State != inbox.StateProcessing || m.Owner != "test" || m.Token != 0 || m.AttemptsStarted != 0 ||
		m.AttemptsFailed != 0 || m.StartedAt.IsZero() || !m.LeaseUntil.IsZero() {
		t.Fatalf("claimed message: %+v", m)
	}
	if m, err := c.GetMessage(ctx, ids[1]); err != nil || m.State != inbox.StatePending || m.Owner != "" ||
		m.Token != 0 || m.AttemptsStarted != 0 || !m.LeaseUntil.IsZero() {
		t.Fatalf("waiting message: %+v, %v", m, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || len(st) != 1 || st[0].Pending != 1 || st[0].Processing != 1 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
}

// claimBatch claims as a worker's batch does (migration 00011): in tx, it locks up to limit ready
// messages (ClaimBatch) and lists them in a batch row (RecordBatch, committed on its own). The batch
// is in flight until tx ends.
func claimBatch(db *testdb.DB, tx pgx.Tx, consumer string, limit int) ([]int64, error) {
	ctx := context.Background()
	st := schemasql.New(db.Schema)
	rows, err := schemasql.Queries.ClaimBatch(ctx, st.Wrap(tx), sqlc.ClaimBatchParams{Consumer: consumer, Max: int32(limit)})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	_, err = schemasql.Queries.RecordBatch(ctx, st.Wrap(db.Pool), sqlc.RecordBatchParams{Consumer: consumer, Xid: "1", Ids: ids, Owner: "test"})
	return ids, err
}

func TestDiscardPending(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "a", "b", "c", "d", "e", "f")
	refund, err := c.Receive(ctx, inbox.Message{Consumer: "ledger", Key: "r", Kind: "Refund", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Receive(ctx, inbox.Message{Consumer: "audit", Key: "a", Kind: "Audit", Payload: []byte(`{}`),
		NotBefore: time.Now().Add(time.Hour)}) // delayed: pending too
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.Complete(t, db, time.Hour, ids[4])
	kill(t, db, "boom", time.Now(), ids[5])
	claimed := claim(t, db, "ledger", 1) // ids[0], the oldest
	if !slices.Equal(claimed, ids[:1]) {
		t.Fatalf("claimed %v, want %v", claimed, ids[:1])
	}

	// A dry run changes nothing and reports what the discard does.
	before := db.Count(t, `SELECT count(*) FROM {schema}.inbox`) + 1000*db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`)
	dry, err := c.DiscardPending(ctx, admin.PendingFilter{Consumer: "ledger", DryRun: true})
	if err != nil || !slices.Equal(dry.Discarded, []int64{ids[1], ids[2], ids[3], refund.ID}) || !slices.Equal(dry.Claimed, ids[:1]) {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if after := db.Count(t, `SELECT count(*) FROM {schema}.inbox`) + 1000*db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`); after != before {
		t.Fatalf("dry run changed rows: %d -> %d", before, after)
	}

	// By id: completed, dead, claimed, unknown and pending ids; only the pending one goes.
	r, err := c.DiscardPending(ctx, admin.PendingFilter{IDs: []int64{ids[0], ids[1], ids[4], ids[5], 424242}})
	if err != nil || !slices.Equal(r.Discarded, ids[1:2]) || !slices.Equal(r.Claimed, ids[:1]) {
		t.Fatalf("by id: %+v, %v", r, err)
	}
	if m, q := pendingRows(t, db, ids[1]); m != 0 || q != 0 {
		t.Fatalf("discarded message left %d inbox and %d queue rows", m, q)
	}
	if m, q := pendingRows(t, db, ids[0], ids[4], ids[5]); m != 3 || q != 1 {
		t.Fatalf("claimed, completed and dead messages: %d inbox and %d queue rows, want 3 and 1", m, q)
	}
	// By consumer and kind.
	r, err = c.DiscardPending(ctx, admin.PendingFilter{Consumer: "ledger", Kind: "Refund"})
	if err != nil || !slices.Equal(r.Discarded, []int64{refund.ID}) || len(r.Claimed) != 0 {
		t.Fatalf("by consumer and kind: %+v, %v", r, err)
	}
	// By consumer: the rest of ledger; audit is left alone.
	r, err = c.DiscardPending(ctx, admin.PendingFilter{Consumer: "ledger"})
	if err != nil || !slices.Equal(r.Discarded, ids[2:4]) || !slices.Equal(r.Claimed, ids[:1]) {
		t.Fatalf("by consumer: %+v, %v", r, err)
	}
	if m, q := pendingRows(t, db, other.ID); m != 1 || q != 1 {
		t.Fatal("message of another consumer discarded")
	}
	// Nothing left to discard: empty, not nil.
	if r, err := c.DiscardPending(ctx, admin.PendingFilter{Consumer: "ledger", Kind: "Refund"}); err != nil ||
		r.Discarded == nil || r.Claimed == nil || len(r.Discarded)+len(r.Claimed) != 0 {
		t.Fatalf("second discard: %+v, %v", r, err)
	}
	// The keys are free again.
	if rc, err := c.Receive(ctx, ledgertest.Message("b", `{"amount":1}`)); err != nil || rc.Outcome != inbox.Inserted {
		t.Fatalf("discarded key: %+v, %v", rc, err)
	}
}

func TestDiscardPendingBadArguments(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "a")
	for _, f := range []admin.PendingFilter{
		{}, {Kind: "OrderPaid"}, {Consumer: "a b"}, {Consumer: "ledger", Kind: "\xff"}, {Consumer: "x\x00"},
		{IDs: []int64{0}}, {IDs: []int64{-1}}, {Consumer: "ledger", IDs: make([]int64, limits.AdminIDs+1)},
	} {
		for _, dry := range []bool{false, true} {
			var ae *txinbox.ArgumentError
			f.DryRun = dry
			r, err := c.DiscardPending(ctx, f)
			if !errors.Is(err, txinbox.ErrInvalidArgument) || !errors.As(err, &ae) || len(r.Discarded) != 0 {
				t.Errorf("%+v: %+v, %v; want an *ArgumentError", f, r, err)
			}
		}
	}
	if m, q := pendingRows(t, db, ids...); m != 1 || q != 1 {
		t.Fatal("bad arguments changed rows")
	}
}

// A queue row locked by a claim in progress is not discarded (reported as claimed), and the discard
// does not wait for it; once the claim is gone the message is discarded.
func TestDiscardPendingSkipsLockedRow(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "a", "b")
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, db.SQL(`SELECT id FROM {schema}.inbox_queue WHERE id = $1 AND consumer = 'ledger' FOR UPDATE`), ids[0]); err != nil {
		t.Fatal(err)
	}
	r, err := c.DiscardPending(ctx, admin.PendingFilter{Consumer: "ledger"})
	if err != nil || !slices.Equal(r.Discarded, ids[1:]) || !slices.Equal(r.Claimed, ids[:1]) {
		t.Fatalf("discard beside a locked row: %+v, %v", r, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = c.DiscardPending(ctx, admin.PendingFilter{IDs: ids[:1]})
	if err != nil || !slices.Equal(r.Discarded, ids[:1]) {
		t.Fatalf("discard once unlocked: %+v, %v", r, err)
	}
	if m, q := pendingRows(t, db, ids...); m != 0 || q != 0 {
		t.Fatalf("%d inbox and %d queue rows left", m, q)
	}
}

// Claims and a discard racing over the same messages: each message is either claimed or discarded,
// never both, and nothing is left half deleted.
func TestDiscardPendingRacesClaims(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	for round := range 5 {
		ids := ledgertest.Receive(t, c, ledgertest.Keys(fmt.Sprintf("r%d", round), 300)...)
		var claimed []int64
		var claimErr error
		started, done := make(chan struct{}), make(chan struct{})
		// The batches stay in flight until the discard has ended (one transaction holds them all).
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				got, err := claimBatch(db, tx, "ledger", 7)
				if i == 0 {
					close(started)
				}
				if err != nil || len(got) == 0 {
					claimErr = err
					return
				}
				claimed = append(claimed, got...)
			}
		}()
		<-started // the discard starts while claims go on
		r, err := c.DiscardPending(ctx, admin.PendingFilter{Consumer: "ledger"})
		<-done
		_ = tx.Rollback(ctx)
		if err != nil || claimErr != nil {
			t.Fatal(err, claimErr)
		}
		for _, id := range r.Discarded {
			if slices.Contains(claimed, id) {
				t.Fatalf("round %d: message %d both claimed and discarded", round, id)
			}
		}
		for _, id := range r.Claimed {
			if !slices.Contains(claimed, id) {
				t.Fatalf("round %d: message %d reported claimed but was not", round, id)
			}
		}
		if n := len(r.Discarded) + len(claimed); n != len(ids) {
			t.Fatalf("round %d: %d discarded + %d claimed, want %d", round, len(r.Discarded), len(claimed), len(ids))
		}
		if m, q := pendingRows(t, db, r.Discarded...); m != 0 || q != 0 {
			t.Fatalf("round %d: discarded messages left %d inbox and %d queue rows", round, m, q)
		}
		// A claim writes nothing (migration 00011): the inbox and queue rows are intact, listed in a
		// batch row.
		if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox m JOIN {schema}.inbox_queue q USING (id, consumer)
			WHERE m.id = ANY($1) AND m.state = 'pending' AND EXISTS (SELECT 1 FROM {schema}.inbox_batch b WHERE b.consumer = m.consumer AND m.id = ANY (b.ids))`, claimed); n != int64(len(claimed)) {
			t.Fatalf("round %d: %d of %d claimed messages intact", round, n, len(claimed))
		}
		ledgertest.Complete(t, db, time.Hour, claimed...)
	}
}

// Discarding the head of an ordering key makes the next message of the key ready at once, instead of
// after the snooze a claim gave it.
func TestDiscardPendingReadiesNextOfKey(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	var ids []int64
	for _, k := range []string{"a", "b"} {
		r, err := c.Receive(ctx, inbox.Message{Consumer: "ledger", Key: k, Kind: "OrderPaid", Payload: []byte(`{}`), OrderingKey: "order-1"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	// b snoozed behind a, as a claim that saw both leaves it.
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox_queue SET run_at = now() + interval '1 hour' WHERE id = $1`), ids[1]); err != nil {
		t.Fatal(err)
	}
	if r, err := c.DiscardPending(ctx, admin.PendingFilter{IDs: ids[:1]}); err != nil || !slices.Equal(r.Discarded, ids[:1]) {
		t.Fatalf("discard: %+v, %v", r, err)
	}
	if got := claim(t, db, "ledger", 10); !slices.Equal(got, ids[1:]) {
		t.Fatalf("claimed %v after discarding the head, want %v", got, ids[1:])
	}
}
