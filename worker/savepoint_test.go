package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// A message that writes and then fails has its writes rolled back (to its savepoint), while the
// messages of its batch before and after it keep theirs. The second failing message fails when each
// message runs in a savepoint of its own (after the first made the optimistic run fail).
func TestFailedMessageRollsBackOnlyItsWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "a-good", "b-fails", "c-good", "d-fails", "e-good")
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		if strings.HasSuffix(m.Key, "-fails") {
			return txinbox.Permanent(errors.New("rejected after writing"))
		}
		return nil
	})
	run(t, e.pool(t, hs, nil))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })
	rows, err := e.Pool.Query(context.Background(), e.SQL(`SELECT key FROM {schema}.effects ORDER BY key`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a-good,c-good,e-good" {
		t.Errorf("effects %v, want a-good, c-good and e-good only", got)
	}
	for _, k := range []string{"b-fails", "d-fails"} {
		if s, _, _, le := e.state(t, k); s != "dead" || !strings.Contains(le, "rejected after writing") {
			t.Errorf("%s: %s (%q), want dead with its error", k, s, le)
		}
	}
}
