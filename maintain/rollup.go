package maintain

import (
	"context"
	"fmt"

	"github.com/txinbox/txinbox/internal/schemasql"
)

// The roll-ups: every batch's finish appends its counts of finished attempts (completed, failed, of
// which dead) to inbox_rollup_batch in the transaction that records the outcomes (FinishBatch,
// migration 00010), and the leader folds them into inbox_rollup (migration 00003), per consumer and
// minute, every RollupInterval. The operator console draws its throughput chart and its hour's
// counts from inbox_rollup: once folded, they are those of the outcomes that committed, whichever
// processes died meanwhile.

// rollupKeepMinutes: rows of inbox_rollup older than two days are deleted by the fold.
const rollupKeepMinutes = 2 * 24 * 60

// foldRollup moves the per-batch counts into inbox_rollup, one statement per consumer (each names
// its consumer: SCALING.md).
func (m *Maintainer) foldRollup(ctx context.Context) error {
	db := m.st.Wrap(m.store.DB)
	consumers, err := schemasql.Queries.RollupConsumers(ctx, db)
	if err != nil {
		return schemasql.Err(err)
	}
	for _, c := range consumers {
		if _, err := schemasql.Queries.RollupFold(ctx, db, c, rollupKeepMinutes); err != nil {
			return fmt.Errorf("txinbox: folding the roll-up of consumer %q: %w", c, err)
		}
	}
	return nil
}
