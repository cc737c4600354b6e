package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/seen"
	"github.com/txinbox/txinbox/seenredis"
)

// SeenCacheKind selects the seen-key cache of a SeenIngest run.
type SeenCacheKind string

// The seen-key cache variants.
const (
	SeenNone  SeenCacheKind = "none"
	SeenLRU   SeenCacheKind = "in-process LRU (seen.NewLRU)"
	SeenRedis SeenCacheKind = "Redis (seenredis)"
)

// seenRecent is how far back a redelivery reaches: one of the client's last seenRecent new keys.
const seenRecent = 1000

// SeenResult is one duplicate-heavy ingest run.
type SeenResult struct {
	Cache      SeenCacheKind
	Clients    int
	Messages   int     // offered, all clients together
	Inserted   int     // receipts Inserted
	Cached     int     // receipts answered from the cache
	Rate       float64 // messages/s
	RoundTrips float64 // database round trips (statements and transaction commands) per message
	RedisCPU   float64 // Redis server CPU seconds during the run (0 without Redis)
	FP         Footprint
}

// countingDB is an txinbox.DB that counts the round trips made through it (one per call: the inbox
// Client sends each statement as one extended-protocol exchange).
type countingDB struct {
	db txinbox.DB
	n  *atomic.Int64
}

func (c countingDB) Begin(ctx context.Context) (pgx.Tx, error) { c.n.Add(1); return c.db.Begin(ctx) }
func (c countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n.Add(1)
	return c.db.Exec(ctx, sql, args...)
}
func (c countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.db.Query(ctx, sql, args...)
}
func (c countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.db.QueryRow(ctx, sql, args...)
}

// redisCPU returns used_cpu_sys + used_cpu_user of the Redis server (seconds).
func redisCPU(ctx context.Context, rdb *redis.Client) float64 {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// SeenIngest has clients concurrent clients each Receive perClient messages, one call each:
// dupShare of them redeliveries (same payload) of one of the client's last 1,000 new keys, the rest
// new keys. cache selects the seen-key cache (shared by the clients); redisAddr is the Redis server
// for SeenRedis (its keys get a prefix of their own and expire).
func (e *Env) SeenIngest(ctx context.Context, cache SeenCacheKind, redisAddr string, clients, perClient int, dupShare float64) (SeenResult, error) {
	res := SeenResult{Cache: cache, Clients: clients, Messages: clients * perClient}
	s, err := e.newInboxSchema(ctx, "seen", int32(clients))
	if err != nil {
		return res, err
	}
	defer s.Drop(ctx)
	var sc txinbox.SeenCache
	var rdb *redis.Client
	switch cache {
	case SeenLRU:
		if sc, err = seen.NewLRU(seen.LRUConfig{}); err != nil {
			return res, err
		}
	case SeenRedis:
		rdb = redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: clients})
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return res, fmt.Errorf("redis at %s: %w", redisAddr, err)
		}
		sc = seenredis.New(rdb, seenredis.Config{Prefix: "txbench:" + s.Name + ":"})
	}
	var trips atomic.Int64
	cl, err := inbox.New(txinbox.Store{DB: countingDB{s.Pool, &trips}, Schema: s.Name, SeenCache: sc}, inbox.Config{})
	if err != nil {
		return res, err
	}
	// Warm the pool's connections and prepared statements outside the clock.
	for i := range clients {
		if _, err := cl.Receive(ctx, inbox.Message{Consumer: benchConsumer, Key: fmt.Sprintf("warm-%d", i), Kind: benchKind, Payload: []byte(`{}`)}); err != nil {
			return res, err
		}
	}
	if err := s.Settle(ctx); err != nil {
		return res, err
	}
	trips.Store(0)
	var redisStart float64
	if rdb != nil {
		redisStart = redisCPU(ctx, rdb)
	}
	mon := e.StartMonitor(ctx, s.App)
	start := time.Now()
	var inserted, cached atomic.Int64
	errc := make(chan error, clients)
	var wg sync.WaitGroup
	for ci := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(ci), 3))
			var recent []int
			next := ci * perClient
			for range perClient {
				n := next
				if len(recent) > 0 && r.Float64() < dupShare {
					n = recent[r.IntN(len(recent))]
				} else {
					next++
					if recent = append(recent, n); len(recent) > seenRecent {
						recent = recent[1:]
					}
				}
				rc, err := cl.Receive(ctx, inbox.Message{Consumer: benchConsumer, Key: eventKey(n), Kind: benchKind, Payload: ingestPayload(n)})
				if err != nil {
					errc <- err
					return
				}
				if rc.Outcome == inbox.Inserted {
					inserted.Add(1)
				}
				if rc.Cached {
					cached.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.FP = mon.Stop()
	if rdb != nil {
		res.RedisCPU = redisCPU(ctx, rdb) - redisStart
	}
	close(errc)
	if err := <-errc; err != nil {
		return res, err
	}
	res.Inserted, res.Cached = int(inserted.Load()), int(cached.Load())
	res.Rate = float64(res.Messages) / elapsed.Seconds()
	res.RoundTrips = float64(trips.Load()) / float64(res.Messages)
	stored, err := s.rowCount(ctx)
	if err != nil {
		return res, err
	}
	if stored != int64(res.Inserted+clients) {
		return res, fmt.Errorf("%d rows stored, %d inserted", stored, res.Inserted+clients)
	}
	return res, nil
}

func (s *inboxSchema) rowCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM "+s.T("inbox")).Scan(&n)
	return n, err
}
