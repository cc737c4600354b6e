package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// verify checks the invariants of a finished run and fills in the report. It returns an error only if
// the checks themselves could not run.
func (r *runner) verify(ctx context.Context) error {
	rep := r.rep
	t := func(name string) string { return pgx.Identifier{r.cfg.Schema, name}.Sanitize() }
	var keys []string
	var amounts []int64
	var poison []string
	for _, m := range r.msgs {
		if m.kind == KindCredit {
			keys = append(keys, m.key)
			amounts = append(amounts, m.amount)
		} else {
			poison = append(poison, m.key)
		}
	}
	n := int64(len(keys))

	// The ledger: exactly the expected keys, each once, with its amount.
	var missing, wrongAmount, extra int64
	err := r.control.QueryRow(ctx, `SELECT
		    (SELECT count(*) FROM unnest($1::text[], $2::bigint[]) AS e(key, amount)
		      WHERE NOT EXISTS (SELECT 1 FROM `+t("chaos_ledger")+` l WHERE l.key = e.key)),
		    (SELECT count(*) FROM unnest($1::text[], $2::bigint[]) AS e(key, amount)
		      JOIN `+t("chaos_ledger")+` l ON l.key = e.key WHERE l.amount <> e.amount),
		    (SELECT count(*) FROM `+t("chaos_ledger")+` l WHERE l.key <> ALL($1::text[])),
		    (SELECT count(*) FROM `+t("chaos_ledger")+`),
		    (SELECT coalesce(sum(amount), 0) FROM `+t("chaos_ledger")+`)`,
		keys, amounts).Scan(&missing, &wrongAmount, &extra, &rep.LedgerRows, &rep.LedgerSum)
	if err != nil {
		return fmt.Errorf("chaos: verify ledger: %w", err)
	}
	if missing != 0 || wrongAmount != 0 || extra != 0 || rep.LedgerRows != n {
		rep.failf("ledger: %d rows for %d messages (%d missing, %d with a wrong amount, %d unexpected)", rep.LedgerRows, n, missing, wrongAmount, extra)
	}
	if rep.LedgerSum != rep.ExpectedSum {
		rep.failf("ledger sum %d, expected %d", rep.LedgerSum, rep.ExpectedSum)
	}

	// The balance: incremented in the same transactions, so once per message.
	var applied int64
	if err := r.control.QueryRow(ctx, "SELECT sum(total)::bigint, sum(applied)::bigint FROM "+t("chaos_balance")).Scan(&rep.Balance, &applied); err != nil {
		return fmt.Errorf("chaos: verify balance: %w", err)
	}
	if rep.Balance != rep.ExpectedSum || applied != n {
		rep.failf("balance %d from %d credits, expected %d from %d", rep.Balance, applied, rep.ExpectedSum, n)
	}

	// The inbox: every message stored once; credits completed, poison dead, nothing left to do.
	var total, pending, processing, queued, doubles int64
	err = r.control.QueryRow(ctx, `SELECT count(*),
		    count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'dead'),
		    count(*) FILTER (WHERE state IN ('pending', 'processing')),
		    (SELECT coalesce(sum(cardinality(ids)), 0) FROM `+t("inbox_batch")+`), -- processing: listed by a batch in flight (00011)
		    count(*) FILTER (WHERE state = 'completed' AND attempts_started > 1),
		    coalesce(max(attempts_started) FILTER (WHERE state = 'completed'), 0),
		    count(*) FILTER (WHERE strpos(coalesce(last_error, ''), $1) > 0),
		    (SELECT count(*) FROM `+t("inbox_queue")+`)
		FROM `+t("inbox"), doubleApply).Scan(&total, &rep.Completed, &rep.Dead, &pending, &processing,
		&rep.RetriedMessages, &rep.MaxAttemptsCredit, &doubles, &queued)
	if err != nil {
		return fmt.Errorf("chaos: verify inbox: %w", err)
	}
	if ns := r.lastRestart.Load(); ns != 0 {
		err := r.control.QueryRow(ctx, "SELECT count(*) FROM "+t("inbox")+" WHERE state = 'completed' AND completed_at > $1",
			time.Unix(0, ns)).Scan(&rep.CompletedAfterRestart)
		if err != nil {
			return fmt.Errorf("chaos: verify restarts: %w", err)
		}
	}
	if total != int64(len(r.msgs)) {
		rep.failf("inbox holds %d messages, expected %d", total, len(r.msgs))
	}
	if pending != 0 || processing != 0 || queued != 0 {
		rep.failf("left over: %d pending, %d processing, %d queue rows", pending, processing, queued)
	}
	if rep.Completed != n {
		rep.failf("%d completed, expected %d", rep.Completed, n)
	}
	if doubles != 0 {
		rep.failf("%d messages were applied a second time (their handler found the ledger row already there)", doubles)
	}
	rows, err := r.control.Query(ctx, "SELECT key, coalesce(last_error, '') FROM "+t("inbox")+" WHERE state = 'dead' ORDER BY key")
	if err != nil {
		return fmt.Errorf("chaos: verify dead letters: %w", err)
	}
	var dead []string
	var wrongDead []string
	for rows.Next() {
		var k, e string
		if err := rows.Scan(&k, &e); err != nil {
			return err
		}
		dead = append(dead, k)
		if !strings.HasPrefix(k, "poison-") && len(wrongDead) < 5 {
			wrongDead = append(wrongDead, fmt.Sprintf("%s (%.200s)", k, e))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	slices.Sort(poison)
	if !slices.Equal(dead, poison) {
		rep.failf("dead letters are not the poison set: %d dead, %d poison; wrongly dead: %v", len(dead), len(poison), wrongDead)
	}

	// Receipts: a conflict would mean a producer's payload changed; every message was inserted at most
	// once (fewer Inserted receipts than messages only when a commit's outcome was lost).
	if rep.Conflicts != 0 {
		rep.failf("%d receipts reported a conflict", rep.Conflicts)
	}
	if rep.Inserted > int64(len(r.msgs)) {
		rep.failf("%d Inserted receipts for %d messages", rep.Inserted, len(r.msgs))
	}
	if rep.UnexpectedExits != 0 {
		rep.failf("%d worker processes exited without being killed (see %s)", rep.UnexpectedExits, rep.LogDir)
	}
	return nil
}
