package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
)

// IngestMode is how a batch is written.
type IngestMode int

// The ingest variants.
const (
	// IngestReceiveMany: inbox.Client.ReceiveMany, one statement per batch (dedup, per-message
	// receipts, queue row).
	IngestReceiveMany IngestMode = iota
	// IngestCopyNew: COPY of only the batch's new rows into a table like inbox (same columns and
	// indexes, no queue table): the client is told which rows are duplicates, so this is the upper
	// bound of writing the same rows, with no deduplication work at all.
	IngestCopyNew
	// IngestCopyStaging: COPY of the whole batch into a temporary table, then INSERT ... SELECT ... ON
	// CONFLICT DO NOTHING into the inbox-like table, in one transaction: deduplication done with COPY.
	IngestCopyStaging
)

func (m IngestMode) String() string {
	switch m {
	case IngestReceiveMany:
		return "txinbox ReceiveMany"
	case IngestCopyNew:
		return "COPY, new rows only (duplicates known in advance)"
	case IngestCopyStaging:
		return "COPY into temp table + INSERT ... ON CONFLICT DO NOTHING"
	}
	return fmt.Sprintf("IngestMode(%d)", int(m))
}

// IngestResult is one ingest run.
type IngestResult struct {
	Mode     IngestMode
	Clients  int
	Batches  int     // per client
	Rows     int     // offered rows, duplicates included
	Inserted int     // new rows stored
	Rate     float64 // offered rows/s
	FP       Footprint
}

// ingestWarm is the number of keys stored before the clock starts; duplicates are drawn from them.
const ingestWarm = 10_000

// ingestRow is one offered message.
type ingestRow struct {
	key     string
	payload []byte
	dup     bool
}

// ingestBatches builds, for each client, batches of size rows of which dupShare are keys from the
// warm set (with the same payload as stored: true redeliveries) and the rest new keys. Deterministic.
func ingestBatches(clients, batches, size int, dupShare float64) [][][]ingestRow {
	r := rand.New(rand.NewPCG(1, 2))
	next := ingestWarm
	out := make([][][]ingestRow, clients)
	for c := range out {
		for range batches {
			b := make([]ingestRow, size)
			for i := range b {
				if r.Float64() < dupShare {
					k := r.IntN(ingestWarm)
					b[i] = ingestRow{key: eventKey(k), payload: ingestPayload(k), dup: true}
				} else {
					b[i] = ingestRow{key: eventKey(next), payload: ingestPayload(next)}
					next++
				}
			}
			out[c] = append(out[c], b)
		}
	}
	return out
}

// ingestPayload is a ~120-byte JSON document.
func ingestPayload(n int) []byte {
	return fmt.Appendf(nil, `{"n":%d,"amount":%d,"currency":"EUR","account":"acc-%06d","reference":"invoice %d, paid by transfer"}`,
		n, n%1000+1, n%997, n)
}

// Ingest offers batches of size messages (dupShare of them duplicates of stored keys) from clients
// concurrent connections, batches per client, and returns offered rows/s.
func (e *Env) Ingest(ctx context.Context, mode IngestMode, clients, batches, size int, dupShare float64) (IngestResult, error) {
	res := IngestResult{Mode: mode, Clients: clients, Batches: batches}
	s, err := e.newInboxSchema(ctx, fmt.Sprintf("ingest%d", mode), int32(clients))
	if err != nil {
		return res, err
	}
	defer s.Drop(ctx)
	target := pgx.Identifier{s.Name, "copy_inbox"}
	// The warm set, stored before the clock starts.
	warm := make([]ingestRow, ingestWarm)
	for i := range warm {
		warm[i] = ingestRow{key: eventKey(i), payload: ingestPayload(i)}
	}
	if mode == IngestReceiveMany {
		for lo := 0; lo < len(warm); lo += 1000 {
			msgs := make([]inbox.Message, 0, 1000)
			for _, r := range warm[lo:min(lo+1000, len(warm))] {
				msgs = append(msgs, inbox.Message{Consumer: benchConsumer, Key: r.key, Kind: benchKind, Payload: r.payload})
			}
			if _, err := s.client.ReceiveMany(ctx, msgs); err != nil {
				return res, err
			}
		}
	} else {
		// A table like inbox: same columns, defaults, constraints, indexes and storage parameters.
		if _, err := e.Admin.Exec(ctx, "CREATE TABLE "+target.Sanitize()+" (LIKE "+s.T("inbox")+" INCLUDING ALL)"); err != nil {
			return res, err
		}
		if err := copyRows(ctx, s.Pool, target, warm); err != nil {
			return res, err
		}
	}
	work := ingestBatches(clients, batches, size, dupShare)
	if err := s.Settle(ctx); err != nil {
		return res, err
	}
	conns := make([]*pgx.Conn, clients)
	for i := range conns {
		c, err := s.Pool.Acquire(ctx)
		if err != nil {
			return res, err
		}
		defer c.Release()
		conns[i] = c.Conn()
		if mode == IngestCopyStaging {
			if _, err := conns[i].Exec(ctx, "CREATE TEMP TABLE staging ON COMMIT DELETE ROWS AS SELECT "+strings.Join(copyColumns, ", ")+" FROM "+target.Sanitize()+" WITH NO DATA"); err != nil {
				return res, err
			}
		}
	}
	mon := e.StartMonitor(ctx, s.App)
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	inserted := make([]int, clients)
	for ci, conn := range conns {
		wg.Go(func() {
			var cl *inbox.Client
			if mode == IngestReceiveMany {
				var err error
				if cl, err = inbox.New(txinbox.Store{DB: conn, Schema: s.Name}, inbox.Config{}); err != nil {
					errc <- err
					return
				}
			}
			msgs := make([]inbox.Message, size)
			for _, b := range work[ci] {
				switch mode {
				case IngestReceiveMany:
					for i, r := range b {
						msgs[i] = inbox.Message{Consumer: benchConsumer, Key: r.key, Kind: benchKind, Payload: r.payload}
					}
					rs, err := cl.ReceiveMany(ctx, msgs)
					if err != nil {
						errc <- err
						return
					}
					for _, r := range rs {
						if r.Outcome == inbox.Inserted {
							inserted[ci]++
						}
					}
				case IngestCopyNew:
					var fresh []ingestRow
					for _, r := range b {
						if !r.dup {
							fresh = append(fresh, r)
						}
					}
					if err := copyRows(ctx, conn, target, fresh); err != nil {
						errc <- err
						return
					}
					inserted[ci] += len(fresh)
				case IngestCopyStaging:
					n, err := copyStaging(ctx, conn, target, b)
					if err != nil {
						errc <- err
						return
					}
					inserted[ci] += n
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.FP = mon.Stop()
	close(errc)
	if err := <-errc; err != nil {
		return res, err
	}
	res.Rows = clients * batches * size
	for _, n := range inserted {
		res.Inserted += n
	}
	res.Rate = float64(res.Rows) / elapsed.Seconds()
	return res, nil
}

var copyColumns = []string{"consumer", "key", "kind", "payload", "headers", "fingerprint"}

type copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error)
}

func copySource(rows []ingestRow) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := rows[i]
		fp := sha256.Sum256(append([]byte(benchKind+"\n"), r.payload...))
		return []any{benchConsumer, r.key, benchKind, string(r.payload), "{}", fp[:]}, nil
	})
}

// copyRows copies rows into table in one COPY.
func copyRows(ctx context.Context, db copier, table pgx.Identifier, rows []ingestRow) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := db.CopyFrom(ctx, table, copyColumns, copySource(rows))
	return err
}

// copyStaging copies rows into the connection's temp table and moves the new ones into table. The rows
// take slot 0, the current generation's slot of a new schema (migration 00006: the unique key is
// (consumer, key, slot)).
func copyStaging(ctx context.Context, conn *pgx.Conn, table pgx.Identifier, rows []ingestRow) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"staging"}, copyColumns, copySource(rows)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "INSERT INTO "+table.Sanitize()+" (consumer, key, kind, payload, headers, fingerprint) "+
			"SELECT consumer, key, kind, payload, headers, fingerprint FROM staging ON CONFLICT (consumer, key, slot) DO NOTHING")
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
