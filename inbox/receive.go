package inbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// The receive path. Every receive call goes through these layers, in this order:
//
//  1. receive: reports the call to the Store's Tracer (txinbox.OpReceive);
//  2. validateAll: checks every message (a *txinbox.ValidationError writes nothing); a Receive call
//     then joins a shared statement with concurrent ones (coalesce.go), which runs layers 3 to 6 for
//     all of them;
//  3. lookUpSeen: with a Store.SeenCache, answers the keys cached with the same fingerprint
//     (txinbox.OpSeenGet);
//  4. insertOrCompare: one ReceiveBatch statement inserts the new keys and compares the others
//     (and repeats within the batch) with the stored rows, in the database; lookUpStored and
//     renewExpired handle the rows committed after its snapshot and the expired ones;
//  5. notify (notify.go): ReceiveBatch's NOTIFY, debounced per consumer;
//  6. remember: puts the committed keys into the Store's SeenCache (at once outside a transaction, in
//     Remember after the caller's commit inside one).

// Receive stores msg unless its key is already stored for its consumer, and returns once that is
// committed. A duplicate is not an error: see [Receipt].Outcome. A key reused with a different kind
// or payload returns the receipt and a *[KeyConflictError] (errors.Is [ErrKeyConflict]). An invalid
// message returns a *[txinbox.ValidationError] (errors.Is [txinbox.ErrInvalidMessage]) and writes
// nothing.
//
// Concurrent Receive calls of one Client share statements (Config.CoalesceMax, on by default): a
// call arriving while another shared statement of the Client runs waits for that statement to
// finish (at most Config.CoalesceWait), then its message is sent with those of the calls that
// arrived meanwhile, as [Client.ReceiveMany] would send them, which commits them
// together. A call on an idle Client is sent at once. Each call gets its own receipt, exactly what
// a call of its own would have returned: a key sent by two calls of one statement is stored from
// the earlier one, and the later gets a Duplicate or a Conflict of it. An invalid message is
// rejected before it joins a statement, and a message that PostgreSQL itself refuses is sent again
// alone, so either only ever fails its own call. Any other error of a shared statement (the
// database unreachable, say) is returned to every call of it; nothing of that statement was stored.
//
// If ctx ends before the call's statement has finished, Receive returns ctx.Err() at once. Then the
// message is either stored or not, never in part, and the caller cannot tell which: if the
// statement had not been sent yet, the message is left out of it and not stored; if it had, the
// statement goes on for the other calls of it and stores the message with theirs (a statement whose
// every caller has given up is cancelled). Receive it again to learn its receipt. A shared statement
// waits on a key held by another transaction (an open [Client.ReceiveTx] of that key, say), and with
// it every call of that statement.
func (c *Client) Receive(ctx context.Context, msg Message) (Receipt, error) {
	if c.co == nil {
		return c.receiveOne(ctx, c.store.DB, msg)
	}
	rs, err := c.observe(ctx, []Message{msg}, func(ctx context.Context, msgs []Message) ([]Receipt, error) {
		if err := c.validateAll(msgs); err != nil {
			return nil, err
		}
		return c.co.receive(ctx, msgs[0])
	})
	if err != nil {
		return Receipt{}, err
	}
	return rs[0], rs[0].Err
}

// ReceiveTx is [Client.Receive] inside the caller's transaction: the message is stored, and becomes
// visible to workers, only if tx commits.
//
// Until tx ends, the stored key holds a row lock on the inbox's unique index: a concurrent receive of
// the same consumer and key (Receive, ReceiveMany or another ReceiveTx, in any process) waits for tx,
// then reports a Duplicate or a Conflict if tx committed, or stores the message itself if tx rolled
// back. Keep such transactions short.
func (c *Client) ReceiveTx(ctx context.Context, tx pgx.Tx, msg Message) (Receipt, error) {
	return c.receiveOne(ctx, tx, msg)
}

func (c *Client) receiveOne(ctx context.Context, db sqlc.DBTX, msg Message) (Receipt, error) {
	rs, err := c.receive(ctx, db, []Message{msg})
	if err != nil {
		return Receipt{}, err
	}
	return rs[0], rs[0].Err
}

// ReceiveMany stores a batch of messages in one round trip (one statement; messages of several
// consumers take one statement per consumer, in one transaction) and returns a receipt per message,
// in order. Conflicts are reported per receipt (Receipt.Err) and do not fail the batch. If any
// message is invalid, it returns a *[txinbox.ValidationError] naming the first one and writes
// nothing. A key that appears twice in the batch is stored once, from its first occurrence; a later
// one is a Duplicate of it when its kind and payload are the same as jsonb (compared by the
// database), and a Conflict otherwise.
func (c *Client) ReceiveMany(ctx context.Context, msgs []Message) ([]Receipt, error) {
	return c.receive(ctx, c.store.DB, msgs)
}

// ReceiveManyTx is [Client.ReceiveMany] inside the caller's transaction.
func (c *Client) ReceiveManyTx(ctx context.Context, tx pgx.Tx, msgs []Message) ([]Receipt, error) {
	return c.receive(ctx, tx, msgs)
}

// receive is layer 1: it runs the call, reporting it to the Store's Tracer if there is one.
func (c *Client) receive(ctx context.Context, db sqlc.DBTX, msgs []Message) ([]Receipt, error) {
	return c.observe(ctx, msgs, func(ctx context.Context, msgs []Message) ([]Receipt, error) {
		return c.validateAndStore(ctx, db, msgs)
	})
}

// observe runs a receive call of msgs, reporting it to the Store's Tracer if there is one. With a
// Tracer that is a txinbox.Injector, run gets msgs with the trace context of the call added to those
// whose headers hold no traceparent (copies: the caller's are not modified).
func (c *Client) observe(ctx context.Context, msgs []Message, run func(ctx context.Context, msgs []Message) ([]Receipt, error)) ([]Receipt, error) {
	t := c.store.Tracer
	if t == nil {
		return run(ctx, msgs)
	}
	ctx = t.TraceStart(ctx, txinbox.TraceStart{Op: txinbox.OpReceive, Schema: c.store.Schema,
		Consumer: firstConsumer(msgs), Messages: traceMessages(msgs)})
	if in, ok := t.(txinbox.Injector); ok {
		msgs = withTrace(ctx, in, msgs)
	}
	rs, err := run(ctx, msgs)
	d := txinbox.TraceEnd{Op: txinbox.OpReceive, Err: err}
	if err == nil {
		d.Results = make([]string, len(rs))
		for i, r := range rs {
			d.Results[i] = string(r.Outcome)
		}
	}
	t.TraceEnd(ctx, d)
	return rs, err
}

// firstConsumer returns the consumer of msgs' first message, "" if there is none.
func firstConsumer(msgs []Message) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[0].Consumer
}

// traceMessages describes msgs to a tracer.
func traceMessages(msgs []Message) []txinbox.TraceMessage {
	out := make([]txinbox.TraceMessage, len(msgs))
	for i := range msgs {
		out[i] = txinbox.TraceMessage{ID: msgs[i].Key, Consumer: msgs[i].Consumer, Kind: msgs[i].Kind, Headers: msgs[i].Headers}
	}
	return out
}

// roomFor reports whether headers can take extra within limits.HeadersBytes (a message at its limit
// keeps its headers as they are, untraced, rather than being refused).
func roomFor(headers, extra map[string]string) bool {
	size := 0
	for k, v := range headers {
		size += len(k) + len(v)
	}
	for k, v := range extra {
		size += len(k) + len(v)
	}
	return size <= limits.HeadersBytes
}

// withTrace returns msgs with the trace context of ctx (in.Inject) added to the headers of each
// message that holds no traceparent, as copies; msgs itself is returned when ctx carries none.
func withTrace(ctx context.Context, in txinbox.Injector, msgs []Message) []Message {
	trace := map[string]string{}
	in.Inject(ctx, trace)
	if len(trace) == 0 {
		return msgs
	}
	var out []Message
	for i := range msgs {
		if msgs[i].Headers[txinbox.HeaderTraceParent] != "" || !roomFor(msgs[i].Headers, trace) {
			continue
		}
		if out == nil {
			out = slices.Clone(msgs)
		}
		h := make(map[string]string, len(msgs[i].Headers)+len(trace))
		maps.Copy(h, msgs[i].Headers)
		maps.Copy(h, trace)
		out[i].Headers = h
	}
	if out == nil {
		return msgs
	}
	return out
}

// validateAndStore runs layers 2 to 4.
func (c *Client) validateAndStore(ctx context.Context, db sqlc.DBTX, msgs []Message) ([]Receipt, error) {
	if err := c.validateAll(msgs); err != nil {
		return nil, err
	}
	return c.storeValid(ctx, db, msgs)
}

// storeValid runs layers 3 and 4 on msgs, already validated (for one call, or for the calls of a
// shared statement: coalesce.go).
func (c *Client) storeValid(ctx context.Context, db sqlc.DBTX, msgs []Message) ([]Receipt, error) {
	if c.store.SeenCache != nil && len(msgs) > 0 {
		return c.lookUpSeen(ctx, db, msgs)
	}
	return c.insertOrCompare(ctx, db, msgs, 0)
}

// validateAll is layer 2: the first invalid message's *txinbox.ValidationError, or nil.
func (c *Client) validateAll(msgs []Message) error {
	for i := range msgs {
		if err := c.validate(i, &msgs[i]); err != nil {
			return err
		}
	}
	return nil
}

// seenMark is carried by a Receipt of a receive in a transaction whose key may be cached once that
// transaction has committed (Client.Remember).
type seenMark struct {
	ok    bool
	epoch uint64
	start time.Time // taken before the receive statement: the entry's TTL runs from here
}

// lookUpSeen is layer 3: messages whose key is cached with their exact fingerprint are answered
// Duplicate (Receipt.Cached); the others go to insertOrCompare, and their keys are then remembered
// (layer 6).
func (c *Client) lookUpSeen(ctx context.Context, db sqlc.DBTX, msgs []Message) ([]Receipt, error) {
	start := time.Now()
	keys := make([]txinbox.SeenKey, 0, len(msgs))
	index := make(map[txinbox.SeenKey]int, len(msgs)) // key -> its position in keys
	for i := range msgs {
		k := c.seenKey(&msgs[i])
		if _, ok := index[k]; !ok {
			index[k] = len(keys)
			keys = append(keys, k)
		}
	}
	var tm []txinbox.TraceMessage
	if c.store.Tracer != nil {
		tm = traceMessages(msgs)
	}
	opCtx := c.seenStart(ctx, txinbox.OpSeenGet, tm)
	gctx, cancel := context.WithTimeout(opCtx, limits.SeenTimeout)
	entries, found, epoch, getErr := c.store.SeenCache.Get(gctx, keys)
	cancel()
	cacheUp := getErr == nil && len(entries) == len(keys) && len(found) == len(keys)
	if getErr == nil && !cacheUp {
		getErr = errSeenShortAnswer
	}

	// A key is answered from the cache only if every occurrence of it in msgs matches its entry:
	// otherwise all of them go to the database, which compares repeats within a batch with their
	// first occurrence, so that receipts are the same with and without a cache.
	res := make([]seenResult, len(msgs))
	keyRes := make([]seenResult, len(keys))
	for i := range msgs {
		m := &msgs[i]
		j := index[c.seenKey(m)]
		switch {
		case !cacheUp:
			res[i] = seenFallback
		case !found[j]:
			res[i] = seenMiss
		case entries[j].Fingerprint != seenFingerprint(m.Kind, m.Payload):
			res[i] = seenMismatch
		default:
			res[i] = seenHit
		}
		if keyRes[j] == "" || keyRes[j] == seenHit {
			keyRes[j] = res[i]
		}
	}
	out := make([]Receipt, len(msgs))
	var rest []int // indexes of the messages sent to the database
	for i := range msgs {
		j := index[c.seenKey(&msgs[i])]
		if keyRes[j] == seenHit {
			out[i] = Receipt{ID: entries[j].ID, Outcome: Duplicate, Cached: true}
			continue
		}
		if res[i] == seenHit {
			res[i] = seenMismatch // a hit sent along with its key's mismatching occurrences
		}
		rest = append(rest, i)
	}
	c.seenEnd(opCtx, txinbox.OpSeenGet, getErr, res)
	if len(rest) == 0 {
		return out, nil
	}
	sub := make([]Message, len(rest))
	for k, i := range rest {
		sub[k] = msgs[i]
	}
	rs, err := c.insertOrCompare(ctx, db, sub, 0)
	if err != nil {
		return nil, err
	}
	_, inTx := db.(pgx.Tx)
	var put []int // indexes into sub to cache now
	firsts := make(map[txinbox.SeenKey]bool, len(rest))
	for k, i := range rest {
		r := rs[k]
		// Only the first occurrence of a key was compared with the stored row; a repeat within the
		// batch was compared with that first occurrence (and is a Duplicate of a Conflict, say).
		sk := c.seenKey(&sub[k])
		first := !firsts[sk]
		firsts[sk] = true
		if cacheUp && first && seenEligible(r) {
			if inTx {
				r.mark = seenMark{ok: true, epoch: epoch, start: start}
			} else {
				put = append(put, k)
			}
		}
		out[i] = r
	}
	if len(put) > 0 {
		c.remember(ctx, epoch, start, sub, rs, put)
	}
	return out, nil
}

func (c *Client) seenKey(m *Message) txinbox.SeenKey {
	return txinbox.SeenKey{Schema: c.store.Schema, Consumer: m.Consumer, Key: m.Key}
}

// seenEligible reports whether a receipt the database returned may be cached, after the statement
// that made it committed, for up to the Store's Retention from a time taken before that statement.
//
// The dedup window of a key ends Retention after its message completes, and completion happens in a
// worker transaction that starts after the message was claimed, and so after the start of any
// statement that saw it pending. Inserted messages and Duplicates of pending ones therefore keep
// their window for at least Retention after that start; so do dead ones, which never expire (their
// rows may be deleted early: see txinbox.Store.SeenCache). A Duplicate of a completed message may be near
// the end of its window, and one of a processing message may be completing in a transaction that
// started before our statement: neither is cached.
func seenEligible(r Receipt) bool {
	switch r.Outcome {
	case Inserted:
		return true
	case Duplicate:
		return r.State == StatePending || r.State == StateDead
	}
	return false
}

// seenStart reports the start of a seen-key cache call of the messages msgs to the Store's Tracer,
// if there is one, and returns the context of the call.
func (c *Client) seenStart(ctx context.Context, op txinbox.Op, msgs []txinbox.TraceMessage) context.Context {
	if c.store.Tracer == nil {
		return ctx
	}
	return c.store.Tracer.TraceStart(ctx, txinbox.TraceStart{Op: op, Schema: c.store.Schema, Messages: msgs})
}

// seenEnd reports the end of the seen-key cache call seenStart reported, with its error and, for a
// look-up, the result of each message.
func (c *Client) seenEnd(ctx context.Context, op txinbox.Op, err error, res []seenResult) {
	if c.store.Tracer == nil {
		return
	}
	d := txinbox.TraceEnd{Op: op, Err: err}
	if res != nil {
		d.Results = make([]string, len(res))
		for i, r := range res {
			d.Results[i] = string(r)
		}
	}
	c.store.Tracer.TraceEnd(ctx, d)
}

type seenError string

func (e seenError) Error() string { return string(e) }

const errSeenShortAnswer = seenError("txinbox: seen-key cache returned fewer entries than keys")

// insertOrCompare is layer 4: it stores msgs, already validated, in one ReceiveBatch statement per
// consumer (insertOrCompareOne), and returns their receipts in order. Each statement names its
// consumer in every reference to a table, so that a table distributed by consumer runs it on one
// shard. Messages of several consumers outside a transaction are stored in one transaction of their
// own, so that the call stays all or nothing, as one statement was.
func (c *Client) insertOrCompare(ctx context.Context, db sqlc.DBTX, msgs []Message, depth int) ([]Receipt, error) {
	groups := map[string][]int{}
	var order []string
	for i := range msgs {
		if _, ok := groups[msgs[i].Consumer]; !ok {
			order = append(order, msgs[i].Consumer)
		}
		groups[msgs[i].Consumer] = append(groups[msgs[i].Consumer], i)
	}
	if len(order) <= 1 {
		return c.insertOrCompareOne(ctx, db, msgs, depth)
	}
	out := make([]Receipt, len(msgs))
	each := func(db sqlc.DBTX) error {
		for _, consumer := range order {
			idx := groups[consumer]
			sub := make([]Message, len(idx))
			for k, i := range idx {
				sub[k] = msgs[i]
			}
			rs, err := c.insertOrCompareOne(ctx, db, sub, depth)
			if err != nil {
				return err
			}
			for k, i := range idx {
				out[i] = rs[k]
			}
		}
		return nil
	}
	if err := inTx(ctx, db, each); err != nil {
		return nil, err
	}
	return out, nil
}

// inTx runs fn in db if db is a transaction (the caller's, for ReceiveTx and ReceiveManyTx), else in
// a transaction of its own on db, so that fn's statements are all or nothing either way.
func inTx(ctx context.Context, db sqlc.DBTX, fn func(sqlc.DBTX) error) error {
	if _, ok := db.(pgx.Tx); ok {
		return fn(db)
	}
	if b, ok := db.(txinbox.DB); ok {
		return pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error { return fn(tx) })
	}
	return fn(db)
}

// insertOrCompareOne stores msgs, all of one consumer, in one ReceiveBatch statement (which also
// sends the debounced notification, layer 5) and returns their receipts. Every message is sent,
// repeats of a key included: the database stores each key's first occurrence and compares every
// other row with it and with the stored row. depth counts the rounds spent on keys deleted while we
// looked.
func (c *Client) insertOrCompareOne(ctx context.Context, db sqlc.DBTX, msgs []Message, depth int) ([]Receipt, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	n := len(msgs)
	p := sqlc.ReceiveBatchParams{
		Consumer: msgs[0].Consumer, Keys: make([]string, n), Kinds: make([]string, n),
		Payloads: make([]string, n), Headers: make([]string, n), OrderingKeys: make([]string, n),
		RunAts: make([]pgtype.Timestamptz, n),
	}
	for i := range msgs {
		m := &msgs[i]
		p.Keys[i], p.Kinds[i] = m.Key, m.Kind
		p.Payloads[i], p.Headers[i] = string(m.Payload), string(headersJSON(m.Headers))
		p.OrderingKeys[i], p.RunAts[i] = m.OrderingKey, runAt(m.NotBefore)
	}

	var rows []sqlc.ReceiveBatchRow
	err := c.inGeneration(ctx, db, p.Consumer, func() (bool, error) {
		var err error
		rows, err = c.receiveBatch(ctx, db, p) // ReceiveBatch, with debounced wake-up notifications
		return err == nil && len(rows) > 0 && rows[0].Retry, err
	})
	if err != nil {
		return nil, translateError(err)
	}
	if len(rows) != n {
		return nil, fmt.Errorf("txinbox: receiving %d messages returned %d rows", n, len(rows))
	}
	out := make([]Receipt, n)
	fps := make([][]byte, n) // the database's fingerprint of each message
	var missing []int        // first occurrences whose conflicting row was not visible to the statement
	var expired []int        // first occurrences whose stored row is past its dedup window
	for i, r := range rows {
		fps[i] = r.Fingerprint
		if int(r.FirstOrd) != i+1 {
			continue // a repeat: below, once its first occurrence is known
		}
		switch {
		case r.Inserted:
			out[i] = Receipt{ID: r.ID, Outcome: Inserted, State: StatePending}
		case r.ID == 0:
			missing = append(missing, i)
		case r.Expired:
			out[i].ID = r.ID
			expired = append(expired, i)
		default:
			out[i] = existing(&msgs[i], r.ID, r.State, r.SameFingerprint, r.Result)
		}
	}
	var vanished []int // first occurrences whose stored row was deleted (cleaned) while we looked
	if len(missing) > 0 {
		// Inserted by a transaction that committed after our statement started: read them now.
		more, gone, err := c.lookUpStored(ctx, db, msgs, fps, missing, out)
		if err != nil {
			return nil, err
		}
		expired = append(expired, more...)
		vanished = append(vanished, gone...)
	}
	if len(expired) > 0 {
		gone, err := c.renewExpired(ctx, db, msgs, fps, expired, out)
		if err != nil {
			return nil, err
		}
		vanished = append(vanished, gone...)
	}
	if len(vanished) > 0 {
		// The cleaner deleted these expired rows between our statements: receive them again (they
		// are new now). Bounded, since each round needs another concurrent deletion.
		if depth >= 3 {
			return nil, fmt.Errorf("txinbox: %d stored keys kept disappearing while receiving; receive again", len(vanished))
		}
		again := make([]Message, len(vanished))
		for k, i := range vanished {
			again[k] = msgs[i]
		}
		rs, err := c.insertOrCompare(ctx, db, again, depth+1)
		if err != nil {
			return nil, err
		}
		for k, i := range vanished {
			out[i] = rs[k]
		}
	}
	var recheck []int // repeats to compare with a stored row the statement did not see
	for i, r := range rows {
		j := int(r.FirstOrd) - 1
		if j == i {
			continue
		}
		// A repeat within the batch: the database compared it with its first occurrence, which is
		// what is stored unless the first occurrence was a Conflict.
		fr := out[j]
		switch {
		case fr.Outcome != Conflict:
			out[i] = existing(&msgs[i], fr.ID, string(fr.State), r.SameAsFirst, fr.Result)
		case r.SameAsFirst: // as the first occurrence, so it differs from the stored row too
			out[i] = existing(&msgs[i], fr.ID, string(fr.State), false, nil)
		case r.ID == fr.ID && !r.Expired: // the stored row the statement saw: compared with it
			out[i] = existing(&msgs[i], r.ID, r.State, r.SameFingerprint, r.Result)
		default: // committed after the statement's snapshot: ask the database (a round trip more)
			recheck = append(recheck, i)
		}
	}
	if len(recheck) > 0 {
		expired, vanished, err := c.lookUpStored(ctx, db, msgs, fps, recheck, out)
		if err != nil {
			return nil, err
		}
		if len(expired)+len(vanished) > 0 {
			return nil, fmt.Errorf("txinbox: %d stored keys expired or were deleted while receiving; receive again", len(expired)+len(vanished))
		}
	}
	return out, nil
}

func existing(m *Message, id int64, state string, same bool, result []byte) Receipt {
	if !same {
		return Receipt{ID: id, Outcome: Conflict, State: State(state),
			Err: &KeyConflictError{Consumer: m.Consumer, Key: m.Key, ID: id}}
	}
	return Receipt{ID: id, Outcome: Duplicate, State: State(state), Result: result}
}

// lookUpStored fills in the receipts of the messages at idx from their stored rows, compared with
// their fingerprints fps (a statement of its own, so with a fresh snapshot under READ COMMITTED),
// and returns those whose row has expired and those whose row is gone.
func (c *Client) lookUpStored(ctx context.Context, db sqlc.DBTX, msgs []Message, fps [][]byte, idx []int, out []Receipt) (expired, vanished []int, err error) {
	p := sqlc.LookupKeysParams{}
	for _, i := range idx {
		p.Consumer = msgs[i].Consumer // one consumer: see insertOrCompare
		p.Keys = append(p.Keys, msgs[i].Key)
		p.Fingerprints = append(p.Fingerprints, fps[i])
	}
	rows, err := schemasql.Queries.LookupKeys(ctx, c.st.Wrap(db), p)
	if err != nil {
		return nil, nil, translateError(err)
	}
	found := make([]bool, len(idx))
	for _, r := range rows {
		found[r.Ord-1] = true
		i := idx[r.Ord-1]
		if r.Expired {
			out[i].ID = r.ID
			expired = append(expired, i)
			continue
		}
		out[i] = existing(&msgs[i], r.ID, r.State, r.SameFingerprint, r.Result)
	}
	for k, ok := range found {
		if !ok { // deleted (cleaned or discarded) between the two statements
			vanished = append(vanished, idx[k])
		}
	}
	return expired, vanished, nil
}

// renewExpired reuses the rows of keys whose dedup window has ended (out[i].ID set): the message is
// accepted as new. A row that another receiver renewed first is reported as that message's
// duplicate; the indexes of rows deleted meanwhile are returned.
func (c *Client) renewExpired(ctx context.Context, db sqlc.DBTX, msgs []Message, fps [][]byte, idx []int, out []Receipt) (vanished []int, err error) {
	p := sqlc.RenewExpiredParams{}
	for _, i := range idx {
		m := &msgs[i]
		p.Ids = append(p.Ids, out[i].ID)
		p.Consumer = m.Consumer // one consumer: see insertOrCompare
		p.Kinds = append(p.Kinds, m.Kind)
		p.Payloads = append(p.Payloads, string(m.Payload))
		p.Headers = append(p.Headers, string(headersJSON(m.Headers)))
		p.Fingerprints = append(p.Fingerprints, fps[i])
		p.OrderingKeys = append(p.OrderingKeys, m.OrderingKey)
		p.RunAts = append(p.RunAts, runAt(m.NotBefore))
	}
	ids, err := schemasql.Queries.RenewExpired(ctx, c.st.Wrap(db), p)
	if err != nil {
		return nil, translateError(err)
	}
	renewed := make(map[int64]bool, len(ids))
	for _, id := range ids {
		renewed[id] = true
	}
	var lost []int
	for _, i := range idx {
		if renewed[out[i].ID] {
			out[i] = Receipt{ID: out[i].ID, Outcome: Inserted, State: StatePending}
		} else {
			lost = append(lost, i)
		}
	}
	if len(lost) > 0 {
		again, gone, err := c.lookUpStored(ctx, db, msgs, fps, lost, out)
		if err != nil {
			return nil, err
		}
		if len(again) > 0 {
			return nil, fmt.Errorf("txinbox: %d expired keys could not be renewed; receive again", len(again))
		}
		return gone, nil
	}
	return nil, nil
}

// receiveBatch runs ReceiveBatch with the notifications the debounce grants (layer 5), and gives
// the turn back to consumers for which nothing was inserted or the statement failed.
func (c *Client) receiveBatch(ctx context.Context, db sqlc.DBTX, p sqlc.ReceiveBatchParams) ([]sqlc.ReceiveBatchRow, error) {
	grants := c.notify.grant([]string{p.Consumer})
	for _, g := range grants {
		p.NotifyConsumers = append(p.NotifyConsumers, g.consumer)
	}
	p.NotifyChannel = c.notify.channel
	rows, err := c.receiveRows(ctx, db, p)
	if len(grants) > 0 {
		inserted := map[string]bool{}
		if err == nil {
			for _, r := range rows {
				if r.Inserted {
					inserted[p.Consumer] = true
					break
				}
			}
		}
		c.notify.settle(grants, inserted)
	}
	return rows, err
}

// genericPlanMax is the most messages of a ReceiveBatch that runs its generic plan (GenericPlan):
// planning the statement costs the server more than running it for a few messages, and a larger batch
// spreads its plan's cost over its messages.
const genericPlanMax = 16

// receiveRows runs ReceiveBatch. A call of at most genericPlanMax messages outside a transaction, on a
// DB that pipelines, sends GenericPlan ahead of it in the same round trip and implicit transaction;
// in a caller's transaction the setting would outlive the statement, so there the server plans as it
// chooses. A server that cannot run the generic plan (Citus: "could not create distributed plan",
// feature not supported) rolled the call's implicit transaction back: the call runs again with a
// custom plan, and so do the Client's later calls.
func (c *Client) receiveRows(ctx context.Context, db sqlc.DBTX, p sqlc.ReceiveBatchParams) ([]sqlc.ReceiveBatchRow, error) {
	if _, inTx := db.(pgx.Tx); !inTx && len(p.Keys) <= genericPlanMax && !c.customPlans.Load() {
		if s, ok := db.(schemasql.BatchSender); ok {
			pl := schemasql.NewPipeline(s)
			w := c.st.Wrap(pl)
			_ = schemasql.Queries.GenericPlan(ctx, w) // queued, sent with ReceiveBatch
			rows, err := schemasql.Queries.ReceiveBatch(ctx, w, p)
			if cerr := pl.Close(); err == nil && cerr != nil {
				rows, err = nil, cerr
			}
			if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "0A000" { // feature_not_supported
				return rows, err
			}
			c.customPlans.Store(true)
		}
	}
	return schemasql.Queries.ReceiveBatch(ctx, c.st.Wrap(db), p)
}

// Remember caches the keys of msgs whose receipts rs were returned for them by [Client.ReceiveTx] or
// [Client.ReceiveManyTx] of this Client, in a transaction that has since committed: call it right
// after the commit succeeded, never before or after a rollback. It does nothing without a
// txinbox.Store.SeenCache. Only receipts the seen-key cache may hold are cached (Inserted, and
// Duplicates of pending or dead messages), for what remains of the Store's Retention since the
// receive call started;
// receipts from calls outside a transaction (already cached), answered from the cache, or from
// another Client are skipped. Cache errors are reported to the Store's Tracer only. msgs
// and rs must have the same length.
func (c *Client) Remember(ctx context.Context, msgs []Message, rs []Receipt) {
	if c.store.SeenCache == nil || len(msgs) != len(rs) {
		return
	}
	// Receipts of one call share their mark; calls are cached one mark at a time.
	var idx []int
	var mark seenMark
	flush := func() {
		if len(idx) > 0 {
			c.remember(ctx, mark.epoch, mark.start, msgs, rs, idx)
		}
		idx = idx[:0]
	}
	for i, r := range rs {
		if !r.mark.ok || !seenEligible(r) {
			continue
		}
		if r.mark != mark {
			flush()
			mark = r.mark
		}
		idx = append(idx, i)
	}
	flush()
}

// remember is layer 6: it caches the keys of msgs[i] for i in idx, with the ids of rs[i], for what
// remains of the Store's Retention since start. Errors are reported to the Store's Tracer (txinbox.OpSeenPut) only.
func (c *Client) remember(ctx context.Context, epoch uint64, start time.Time, msgs []Message, rs []Receipt, idx []int) {
	ttl := c.store.Retention - time.Since(start)
	if ttl <= 0 {
		return
	}
	keys := make([]txinbox.SeenKey, 0, len(idx))
	entries := make([]txinbox.SeenEntry, 0, len(idx))
	ttls := make([]time.Duration, 0, len(idx))
	done := make(map[txinbox.SeenKey]bool, len(idx))
	var tm []txinbox.TraceMessage // for the Store's Tracer
	for _, i := range idx {
		m := &msgs[i]
		k := c.seenKey(m)
		if done[k] {
			continue // a repeat within the batch: the first occurrence is the one stored
		}
		done[k] = true
		if c.store.Tracer != nil {
			tm = append(tm, txinbox.TraceMessage{ID: m.Key, Consumer: m.Consumer, Kind: m.Kind, Headers: m.Headers})
		}
		keys = append(keys, k)
		entries = append(entries, txinbox.SeenEntry{ID: rs[i].ID, Fingerprint: seenFingerprint(m.Kind, m.Payload)})
		ttls = append(ttls, ttl)
	}
	ctx = c.seenStart(ctx, txinbox.OpSeenPut, tm)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limits.SeenTimeout)
	err := c.store.SeenCache.Put(pctx, epoch, keys, entries, ttls)
	cancel()
	c.seenEnd(ctx, txinbox.OpSeenPut, err, nil)
}

// seenResult says what the seen-key cache did for a received message: the values of
// txinbox.TraceEnd.Results for txinbox.OpSeenGet (documented there).
type seenResult string

// The results of a seen-key cache lookup, per message.
const (
	seenHit      seenResult = "hit"      // answered Duplicate from the cache, no database round trip
	seenMiss     seenResult = "miss"     // no entry: sent to the database
	seenMismatch seenResult = "mismatch" // an entry with another fingerprint: sent to the database
	seenFallback seenResult = "fallback" // the cache failed or timed out: sent to the database
)
