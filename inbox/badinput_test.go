package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Bad input: every call gets a typed error, writes nothing, and leaves the stored rows as they were
// (the tables are checksummed before and after).

// badEnv is a schema with a few stored messages (pending, completed with a result, dead undecodable)
// and a client on it.
type badEnv struct {
	*testdb.DB
	c *inbox.Client
}

func newBadEnv(t *testing.T, cfg inbox.Config) *badEnv {
	t.Helper()
	db := testdb.New(t)
	c, err := inbox.New(db.Store(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &badEnv{DB: db, c: c}
	ctx := context.Background()
	if _, err := c.ReceiveMany(ctx, []inbox.Message{
		{Consumer: "ledger", Key: "stored-1", Kind: "credit", Payload: []byte(`{"amount": 1}`), Headers: map[string]string{"trace": "t1"}},
		{Consumer: "ledger", Key: "stored-2", Kind: "credit", Payload: []byte(`{"amount": 2}`), OrderingKey: "acct-9"},
		{Consumer: "audit", Key: "stored-1", Kind: "credit", Payload: []byte(`[1, "é", null]`)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox SET state = 'completed', result = '{"ok": true}', completed_at = now(),
		expires_at = now() + interval '1 day' WHERE key = 'stored-2'`)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`DELETE FROM {schema}.inbox_queue q USING {schema}.inbox m WHERE q.id = m.id AND q.consumer = m.consumer AND m.key = 'stored-2'`)); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReceiveUndecodableTx(ctx, tx, inbox.Undecodable{Consumer: "ledger", Raw: []byte("\x00\xff not json"), Reason: "bad bytes"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// checksum digests every row of both tables, every column included.
func (e *badEnv) checksum(t *testing.T) string {
	t.Helper()
	// One statement per table: a distributed database (internal/citus) runs each on every shard.
	var s string
	for _, table := range []string{"inbox", "inbox_queue"} {
		var d string
		err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT count(*) || ':' ||
			coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') FROM {schema}.`+table+` t`)).Scan(&d)
		if err != nil {
			t.Fatal(err)
		}
		s += d + "/"
	}
	return s
}

// wantInvalid fails t unless err is a *ValidationError for field at index (errors.Is ErrInvalidMessage).
func wantInvalid(t *testing.T, name string, err error, index int, field string) {
	t.Helper()
	var ve *txinbox.ValidationError
	switch {
	case !errors.Is(err, txinbox.ErrInvalidMessage) || !errors.As(err, &ve):
		t.Errorf("%s: err = %v (%T), want a *ValidationError", name, err, err)
	case ve.Field != field || ve.Index != index:
		t.Errorf("%s: %v: field %q index %d, want field %q index %d", name, err, ve.Field, ve.Index, field, index)
	case ve.Reason == "" || !strings.Contains(err.Error(), field):
		t.Errorf("%s: unclear error %q", name, err)
	}
}

func okMsg(key string) inbox.Message {
	return inbox.Message{Consumer: "ledger", Key: key, Kind: "credit", Payload: []byte(`{"amount": 5}`)}
}

// badMessage is one invalid message and the field it must be rejected for.
type badMessage struct {
	name  string
	field string
	msg   inbox.Message
}

// badMessages lists invalid messages; maxPayload is the client's payload limit.
func badMessages(maxPayload int) []badMessage {
	with := func(f func(m *inbox.Message)) inbox.Message {
		m := okMsg("k")
		f(&m)
		return m
	}
	key := func(k string) inbox.Message { return with(func(m *inbox.Message) { m.Key = k }) }
	payload := func(p []byte) inbox.Message { return with(func(m *inbox.Message) { m.Payload = p }) }
	header := func(k, v string) inbox.Message {
		return with(func(m *inbox.Message) { m.Headers = map[string]string{"ok": "fine", k: v} })
	}
	sqlText := `x'); DROP TABLE inbox; --`
	return []badMessage{
		{"empty key", "key", key("")},
		{"over-long key", "key", key(strings.Repeat("k", limits.KeyBytes+1))},
		{"over-long multibyte key", "key", key(strings.Repeat("€", limits.KeyBytes/3+1))},
		{"invalid UTF-8 key", "key", key("a\xffb")},
		{"truncated UTF-8 key", "key", key("a\xe2\x82")},
		{"UTF-8 surrogate key", "key", key("\xed\xa0\x80")},
		{"NUL key", "key", key("a\x00b")},
		{"newline key", "key", key("a\nb")},
		{"DEL key", "key", key("a\x7fb")},
		{"C1 control key", "key", key("a\u0085b")},
		{"empty consumer", "consumer", with(func(m *inbox.Message) { m.Consumer = "" })},
		{"SQL consumer", "consumer", with(func(m *inbox.Message) { m.Consumer = sqlText })},
		{"over-long consumer", "consumer", with(func(m *inbox.Message) { m.Consumer = strings.Repeat("c", 129) })},
		{"empty kind", "kind", with(func(m *inbox.Message) { m.Kind = "" })},
		{"SQL kind", "kind", with(func(m *inbox.Message) { m.Kind = sqlText })},
		{"NUL kind", "kind", with(func(m *inbox.Message) { m.Kind = "credit\x00" })},
		{"nil payload", "payload", payload(nil)},
		{"empty payload", "payload", payload([]byte{})},
		{"huge payload", "payload", payload([]byte(`"` + strings.Repeat("x", maxPayload) + `"`))},
		{"truncated JSON", "payload", payload([]byte(`{"amount": `))},
		{"two documents", "payload", payload([]byte(`{} {}`))},
		{"single quotes", "payload", payload([]byte(`{'amount': 1}`))},
		{"bare word", "payload", payload([]byte(`nul`))},
		{"BOM", "payload", payload([]byte("\uFEFF{}"))},
		{"invalid UTF-8 in string", "payload", payload([]byte("{\"a\": \"\xff\"}"))},
		{"raw control in string", "payload", payload([]byte("{\"a\": \"x\ny\"}"))},
		{`\u0000 escape`, "payload", payload([]byte(`{"a": "x\u0000y"}`))},
		{"NUL byte", "payload", payload([]byte("{\"a\": 1}\x00"))},
		// What json.Valid accepts but PostgreSQL jsonb refuses, or would blow up.
		{"lone high surrogate escape", "payload", payload([]byte(`{"s": "\ud800"}`))},
		{"lone low surrogate escape", "payload", payload([]byte(`["\udc00"]`))},
		{"high surrogate then a letter", "payload", payload([]byte(`"\uD800\u0041"`))},
		{"high surrogate then an escaped backslash", "payload", payload([]byte(`"\ud800\\udc00"`))},
		{"reversed surrogate pair", "payload", payload([]byte(`"\udc00\ud800"`))},
		{"surrogate after an escaped backslash", "payload", payload([]byte(`"\\\ud800"`))},
		{"NUL escape in a key", "payload", payload([]byte(`{"\u0000": 1}`))},
		{"too many integer digits", "payload", payload([]byte(`1e131072`))},
		{"too many integer digits, mantissa", "payload", payload([]byte(`{"n": 99.5e131071}`))},
		{"too many decimals", "payload", payload([]byte(`[1e-16384]`))},
		{"too many decimals, zero", "payload", payload([]byte(`0.0e-16383`))},
		{"too many decimals, integer", "payload", payload([]byte(`100e-16385`))},
		{"huge exponent", "payload", payload([]byte(`0e1073741823`))},
		{"enormous exponent", "payload", payload([]byte(`-1E+99999999999999999999`))},
		{"number printed past the limit", "payload", payload([]byte(fmt.Sprintf(`[1e%d]`, maxPayload-1)))},
		{"numbers printed past the limit", "payload", payload([]byte(strings.Repeat(`1e99,`, maxPayload/100+1) + `0`))},
		{"empty header name", "headers", header("", "v")},
		{"NUL header name", "headers", header("a\x00", "v")},
		{"over-long header name", "headers", header(strings.Repeat("h", 257), "v")},
		{"invalid UTF-8 header value", "headers", header("h", "\xff")},
		{"control in header value", "headers", header("h", "a\rb")},
		{"over-long header value", "headers", header("h", strings.Repeat("v", 8193))},
		{"headers over MaxHeadersBytes together", "headers", with(func(m *inbox.Message) {
			m.Headers = map[string]string{}
			for i := 0; i <= limits.HeadersBytes/limits.HeaderValueBytes; i++ {
				m.Headers[fmt.Sprintf("h%03d", i)] = strings.Repeat("v", limits.HeaderValueBytes-4)
			}
		})},
		{"over-long ordering key", "ordering_key", with(func(m *inbox.Message) { m.OrderingKey = strings.Repeat("o", 512+1) })},
		{"NUL ordering key", "ordering_key", with(func(m *inbox.Message) { m.OrderingKey = "o\x00" })},
	}
}

func TestBadMessagesWriteNothing(t *testing.T) {
	t.Parallel()
	e := newBadEnv(t, inbox.Config{MaxPayloadBytes: 4096})
	ctx := context.Background()
	before := e.checksum(t)
	for _, bm := range badMessages(4096) {
		if err := e.c.Validate(bm.msg); err == nil {
			t.Errorf("%s: Validate accepted it", bm.name)
		}
		_, err := e.c.Receive(ctx, bm.msg)
		wantInvalid(t, bm.name+" (Receive)", err, 0, bm.field)

		// In a batch, at index 2, after valid messages: the whole batch is rejected.
		rs, err := e.c.ReceiveMany(ctx, []inbox.Message{okMsg("fresh-1"), okMsg("stored-1"), bm.msg, okMsg("fresh-2")})
		wantInvalid(t, bm.name+" (ReceiveMany)", err, 2, bm.field)
		if rs != nil {
			t.Errorf("%s: ReceiveMany returned receipts with its error: %+v", bm.name, rs)
		}

		// In the caller's transaction: rejected before any statement, so the transaction is still
		// usable and the caller's other writes commit.
		tx, err := e.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.c.ReceiveTx(ctx, tx, bm.msg)
		wantInvalid(t, bm.name+" (ReceiveTx)", err, 0, bm.field)
		_, err = e.c.ReceiveManyTx(ctx, tx, []inbox.Message{okMsg("fresh-3"), bm.msg})
		wantInvalid(t, bm.name+" (ReceiveManyTx)", err, 1, bm.field)
		var one int
		if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Errorf("%s: the caller's transaction is unusable after the rejection: %v", bm.name, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if after := e.checksum(t); after != before {
			t.Fatalf("%s: the stored rows changed: %s -> %s", bm.name, before, after)
		}
	}
	// The limit itself is accepted: exactly MaxPayloadBytes bytes.
	m := okMsg("at-limit")
	m.Payload = []byte(`"` + strings.Repeat("x", 4096-2) + `"`)
	if r, err := e.c.Receive(ctx, m); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("payload of exactly the limit: %+v, %v", r, err)
	}
}

// The edges of what jsonb can hold are accepted, stored, and compare as duplicates of themselves.
func TestPayloadEdgesAccepted(t *testing.T) {
	t.Parallel()
	e := newBadEnv(t, inbox.Config{})
	ctx := context.Background()
	manyHeaders := map[string]string{}
	for i := 0; i < limits.HeadersBytes/limits.HeaderValueBytes; i++ {
		manyHeaders[fmt.Sprintf("h%03d", i)] = strings.Repeat("v", limits.HeaderValueBytes-4)
	}
	for i, p := range []string{
		`"\ud800\udc00"`, `"\uDBFF\uDFFF"`, `"\\ud800"`, `"\\\\ud800"`, `"\\u0000"`, `{"\ud83d\ude00": "\u00e9"}`,
		`1e131071`, `-9.99e131071`, `1e-16383`, `0e-16383`, `0.5e-16382`, `0e1073741822`, `1E+0000000000000002`,
		`-0`, `-0.0`, `[1e99, 1e-99, 123456789012345678901234567890.5]`,
	} {
		m := okMsg(fmt.Sprintf("edge-%d", i))
		m.Payload = []byte(p)
		if i == 0 {
			m.Headers = manyHeaders
		}
		r, err := e.c.Receive(ctx, m)
		if err != nil || r.Outcome != inbox.Inserted {
			t.Errorf("%s: %+v, %v", p, r, err)
			continue
		}
		if d, err := e.c.Receive(ctx, m); err != nil || d.Outcome != inbox.Duplicate {
			t.Errorf("%s again: %+v, %v", p, d, err)
		}
	}
}

// A rejected message inside the caller's transaction does not abort it: the caller's own writes, and
// valid messages received in it, commit.
func TestBadMessageInCallerTransaction(t *testing.T) {
	t.Parallel()
	e := newBadEnv(t, inbox.Config{})
	ctx := context.Background()
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := e.c.ReceiveTx(ctx, tx, okMsg("")); !errors.Is(err, txinbox.ErrInvalidMessage) {
		t.Fatalf("empty key: %v", err)
	}
	if r, err := e.c.ReceiveTx(ctx, tx, okMsg("good-after-bad")); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("valid message after a rejected one: %+v, %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'good-after-bad'`); n != 1 {
		t.Fatalf("rows = %d", n)
	}
}

func TestBadUndecodable(t *testing.T) {
	t.Parallel()
	e := newBadEnv(t, inbox.Config{MaxPayloadBytes: 64})
	ctx := context.Background()
	ok := func(f func(u *inbox.Undecodable)) inbox.Undecodable {
		u := inbox.Undecodable{Consumer: "ledger", Key: "u", Raw: []byte("x"), Reason: "r"}
		f(&u)
		return u
	}
	cases := []struct {
		name, field string
		u           inbox.Undecodable
	}{
		{"empty consumer", "consumer", ok(func(u *inbox.Undecodable) { u.Consumer = "" })},
		{"SQL consumer", "consumer", ok(func(u *inbox.Undecodable) { u.Consumer = "a'; DROP TABLE inbox; --" })},
		{"over-long key", "key", ok(func(u *inbox.Undecodable) { u.Key = strings.Repeat("k", limits.KeyBytes+1) })},
		{"invalid UTF-8 key", "key", ok(func(u *inbox.Undecodable) { u.Key = "\xff" })},
		{"NUL key", "key", ok(func(u *inbox.Undecodable) { u.Key = "\x00" })},
		{"bad kind", "kind", ok(func(u *inbox.Undecodable) { u.Kind = "no spaces allowed" })},
		{"NUL header", "headers", ok(func(u *inbox.Undecodable) { u.Headers = map[string]string{"h": "\x00"} })},
		{"huge raw", "raw", ok(func(u *inbox.Undecodable) { u.Raw = make([]byte, 65) })},
	}
	before := e.checksum(t)
	for _, c := range cases {
		tx, err := e.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.c.ReceiveUndecodableTx(ctx, tx, c.u)
		wantInvalid(t, c.name, err, 0, c.field)
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: commit after the rejection: %v", c.name, err)
		}
		if after := e.checksum(t); after != before {
			t.Fatalf("%s: the stored rows changed", c.name)
		}
	}

	// What the raw bytes and reason may hold is stored as it is (raw) or made storable (reason): NUL
	// and invalid UTF-8 are accepted, and no key is needed (the content key is used).
	raw := []byte("\x00\xfe\xff{\"a\":")
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.c.ReceiveUndecodableTx(ctx, tx, inbox.Undecodable{Consumer: "ledger", Raw: raw, Reason: "bad \x00 \xff reason"})
	if err != nil || r.Outcome != inbox.Inserted || r.State != inbox.StateDead {
		t.Fatalf("binary raw: %+v, %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := getMessage(ctx, e.DB, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Raw) != string(raw) || got.Key != inbox.ContentKey("undecodable", raw) || got.Kind != "undecodable" ||
		got.LastError != "bad  ? reason" {
		t.Fatalf("stored undecodable: raw %q key %q kind %q error %q", got.Raw, got.Key, got.Kind, got.LastError)
	}
}

// badSchemas are schema names that must be refused before anything is created.
var badSchemas = []string{
	`a"b`,
	`a.b`,
	`public.inbox`,
	`x; DROP TABLE inbox; --`,
	`public"; DROP SCHEMA public CASCADE; --`,
	`a b`,
	`1abc`,
	`schéma`,
	"a\x00b",
	"a\nb",
	strings.Repeat("s", 64),
	`"quoted"`,
	`x'y`,
	`$1`,
}

func wantConfigError(t *testing.T, name string, err error, field string) {
	t.Helper()
	var ce *txinbox.ConfigError
	if !errors.Is(err, txinbox.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != field {
		t.Errorf("%s: err = %v (%T), want a *ConfigError for %s", name, err, err, field)
	}
}

func TestBadSchemaNamesCreateNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	candidates := testdb.SchemaCandidates(badSchemas)
	before := testdb.ExistingSchemas(t, db.Pool, candidates)
	for _, s := range badSchemas {
		name := fmt.Sprintf("schema %q", s)
		if err := txinbox.ValidateSchema(s); err == nil {
			t.Errorf("%s: ValidateSchema accepted it", name)
		}
		c, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: s}, inbox.Config{})
		wantConfigError(t, name+" (New)", err, "Store.Schema")
		if c != nil {
			t.Errorf("%s: New returned a client with its error", name)
		}
		m, err := migrate.New(ctx, cc, txinbox.Store{Schema: s}, nil)
		wantConfigError(t, name+" (migrate.New)", err, "Store.Schema")
		if m != nil {
			t.Errorf("%s: migrate.New returned a migrator with its error", name)
			_ = m.Close()
		}
		wantConfigError(t, name+" (migrate.Up)", migrate.Up(ctx, txinbox.Store{DB: db.Pool, Schema: s}), "Store.Schema")
	}
	if after := testdb.ExistingSchemas(t, db.Pool, candidates); after != before || !strings.Contains(before, "public") {
		t.Fatalf("schemas among %q: %q before, %q after; want the same, public included", candidates, before, after)
	}
	// Other bad configuration.
	_, err = inbox.New(db.Store(), inbox.Config{MaxPayloadBytes: -1})
	wantConfigError(t, "negative MaxPayloadBytes", err, "MaxPayloadBytes")
}
