package worker

import (
	"context"
	"time"

	"github.com/txinbox/txinbox/internal/schemasql"
)

// Heartbeats: a running pool keeps a row of inbox_pools (migration 00010) naming its consumer and
// owner, written when it starts and every heartbeatEvery, deleted when it stops. A pool that has
// claimed nothing for a minute (tuning.idleWarnAfter) reads them to name the consumers whose messages wait in
// the queue with no pool seen within heartbeatFresh (package maintain deletes the rows of pools that
// died, after an hour).
const (
	heartbeatEvery = 15 * time.Second
	heartbeatFresh = time.Minute
	// maxWaitingConsumers bounds the consumers the idle check reads (one index descent each).
	maxWaitingConsumers = 100
)

// heartbeat renews the pool's row every heartbeatEvery and checks, while the pool is idle, for
// consumers that no pool serves, until the pool stops.
func (p *Pool) heartbeat(ctx context.Context) {
	tick := heartbeatEvery
	warnAfter := p.cfg.tune.idleWarnAfter
	if warnAfter > 0 {
		tick = min(tick, warnAfter)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	lastBeat, lastCheck := time.Now(), time.Time{}
	warned := false
	for {
		select {
		case <-t.C:
		case <-p.eng.Stopping():
			return
		case <-ctx.Done():
			return
		}
		if time.Since(lastBeat) >= heartbeatEvery {
			p.beat(ctx)
			lastBeat = time.Now()
		}
		if warnAfter < 0 {
			continue
		}
		idle := time.Since(p.epoch) - time.Duration(p.lastMessage.Load())
		switch {
		case idle < warnAfter:
			warned = false // a message came: a later idle stretch may warn again
		case !warned && time.Since(lastCheck) >= warnAfter:
			lastCheck = time.Now()
			warned = p.warnUnserved(ctx, idle)
		}
	}
}

// beat writes the pool's heartbeat. Errors are logged at Debug.
func (p *Pool) beat(ctx context.Context) {
	if err := schemasql.Queries.PoolHeartbeat(ctx, p.eng.St.Wrap(p.store.DB), p.cfg.Consumer, p.cfg.Owner); err != nil && ctx.Err() == nil {
		p.eng.Log.Debug("txinbox: writing the pool's heartbeat failed", "consumer", p.cfg.Consumer, "err", err)
	}
}

// gone deletes the pool's heartbeat (it stopped).
func (p *Pool) gone(ctx context.Context) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := schemasql.Queries.PoolGone(gctx, p.eng.St.Wrap(p.store.DB), p.cfg.Consumer, p.cfg.Owner); err != nil {
		p.eng.Log.Debug("txinbox: deleting the pool's heartbeat failed", "consumer", p.cfg.Consumer, "err", err)
	}
}

// warnUnserved logs a warning, and reports true, if the queue holds messages no worker has claimed
// of consumers that no pool seen within heartbeatFresh serves.
func (p *Pool) warnUnserved(ctx context.Context, idle time.Duration) bool {
	db := p.eng.St.Wrap(p.store.DB)
	served, err := schemasql.Queries.ServedConsumers(ctx, db, heartbeatFresh.Seconds())
	if err != nil {
		if ctx.Err() == nil {
			p.eng.Log.Debug("txinbox: reading the pools' heartbeats failed", "consumer", p.cfg.Consumer, "err", err)
		}
		return false
	}
	isServed := map[string]bool{p.cfg.Consumer: true}
	for _, c := range served {
		isServed[c] = true
	}
	var unserved []string
	after := ""
	for range maxWaitingConsumers {
		c, err := schemasql.Queries.NextWaitingConsumer(ctx, db, after)
		if err != nil {
			if ctx.Err() == nil {
				p.eng.Log.Debug("txinbox: reading the queue's consumers failed", "consumer", p.cfg.Consumer, "err", err)
			}
			return false
		}
		if c == "" {
			break
		}
		if !isServed[c] {
			unserved = append(unserved, c)
		}
		after = c
	}
	if len(unserved) == 0 {
		return false
	}
	p.eng.Log.Warn("txinbox: this pool's consumer has had no message for a while, and messages of consumers that no pool serves are waiting: is Consumer mistyped?",
		"consumer", p.cfg.Consumer, "idle", idle.Round(time.Second), "unserved_consumers", unserved)
	return true
}
