package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ProtoDrain measures a design txinbox does not implement (yet): the claim inside the batch
// transaction, its row locks held until the commit (the lock is the fence, as in the raw loop),
// and the attempt charged by one record per batch committed on a second connection before the
// handler runs, deleted by the batch transaction with the effects. It drains n messages stored by
// txinbox's own Receive from txinbox's own tables with 4 workers, perTx messages per transaction:
// look for records of batches that ended without committing and take the transaction's id (one
// statement), claim and read the payloads (one statement), record the attempt, insert the ledger
// rows (one multi-row INSERT, as the batch-handler row), delete the queue rows and mark the inbox
// rows completed (one statement), delete the record, commit.
//
// It is a measurement of the design's cost, not an implementation: a record left behind stops the
// drain instead of being charged (no rescue, no crash accounting, no retries or dead letters).
// docs/design/claim.md, "The claim inside the batch transaction: a prototype".
func (e *Env) ProtoDrain(ctx context.Context, n, perTx int) (float64, Footprint, error) {
	const workers = 4
	s, err := e.newInboxSchema(ctx, "proto", 2*workers)
	if err != nil {
		return 0, Footprint{}, err
	}
	defer s.Drop(ctx)
	if err := s.receivePending(ctx, 1, n); err != nil {
		return 0, Footprint{}, err
	}
	attempts := s.T("attempt_log")
	if _, err := e.Admin.Exec(ctx, "CREATE TABLE "+attempts+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		consumer text NOT NULL, xid xid8 NOT NULL, ids bigint[] NOT NULL, started_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, Footprint{}, err
	}
	if err := s.Settle(ctx); err != nil {
		return 0, Footprint{}, err
	}
	sql := protoStatements{
		orphans: `SELECT pg_current_xact_id()::text, (SELECT count(*) FROM ` + attempts + `
			WHERE consumer = $1 AND pg_xact_status(xid) = 'aborted')`,
		claim: `WITH c AS (
				SELECT q.id FROM ` + s.T("inbox_queue") + ` q
				WHERE q.consumer = $1 AND NOT q.claimed AND q.run_at <= now()
				ORDER BY q.run_at, q.id LIMIT $2 FOR UPDATE SKIP LOCKED)
			SELECT m.id, m.key, m.payload FROM c CROSS JOIN LATERAL (
				SELECT m.id, m.key, m.payload FROM ` + s.T("inbox") + ` m WHERE m.id = c.id AND m.consumer = $1 OFFSET 0) m`,
		record: `INSERT INTO ` + attempts + ` (consumer, xid, ids) VALUES ($1, $2::text::xid8, $3) RETURNING id`,
		insert: `INSERT INTO ` + s.T("ledger") + ` (event_id, amount) SELECT * FROM unnest($1::text[], $2::bigint[])`,
		finish: `WITH d AS (DELETE FROM ` + s.T("inbox_queue") + ` q WHERE q.consumer = $1 AND q.id = ANY ($2::bigint[]))
			UPDATE ` + s.T("inbox") + ` m SET state = 'completed', attempts_started = m.attempts_started + 1,
				token = m.token + 1, started_at = now(), completed_at = now(), expires_at = now() + interval '7 days'
			FROM ROWS FROM (unnest($2::bigint[]), unnest($3::text[])) AS f(id, key)
			WHERE m.id = f.id AND m.consumer = $1 AND m.key = f.key`,
		unrecord: `DELETE FROM ` + attempts + ` WHERE id = $1`,
	}
	// Each worker has its batch connection and the connection its attempt records commit on (with
	// synchronous_commit off, as txinbox's claim), opened before the clock starts.
	conns := make([][2]*pgx.Conn, workers)
	for i := range conns {
		for j := range conns[i] {
			c, err := s.Pool.Acquire(ctx)
			if err != nil {
				return 0, Footprint{}, err
			}
			defer c.Release()
			conns[i][j] = c.Conn()
		}
		if _, err := conns[i][1].Exec(ctx, "SET synchronous_commit = off"); err != nil {
			return 0, Footprint{}, err
		}
	}
	return s.timeBatches(ctx, n, workers, func(i int) func() (int, error) {
		return func() (int, error) { return sql.batch(ctx, conns[i][0], conns[i][1], perTx) }
	})
}

type protoStatements struct{ orphans, claim, record, insert, finish, unrecord string }

// batch runs one batch transaction on conn, its attempt record committing on rec, and returns how
// many messages it handled (0: none left).
func (p protoStatements) batch(ctx context.Context, conn, rec *pgx.Conn, perTx int) (int, error) {
	var b claimedBatch
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The batch transaction's id (for its record), and the records left by batches that rolled
		// back: a real implementation charges their attempts first; here there are none. (A record
		// whose transaction committed was deleted by it: this statement's snapshot may still show it.)
		var xid string
		var orphans int64
		if err := tx.QueryRow(ctx, p.orphans, benchConsumer).Scan(&xid, &orphans); err != nil {
			return err
		}
		if orphans != 0 {
			return fmt.Errorf("%d attempt records of batches that did not commit", orphans)
		}
		rows, err := tx.Query(ctx, p.claim, benchConsumer, perTx)
		if err != nil {
			return err
		}
		if err := b.scan(rows); err != nil || len(b.ids) == 0 {
			return err
		}
		var record int64
		if err := rec.QueryRow(ctx, p.record, benchConsumer, xid, b.ids).Scan(&record); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.insert, b.keys, b.amounts); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.finish, benchConsumer, b.ids, b.keys); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, p.unrecord, record)
		return err
	})
	return len(b.ids), err
}
