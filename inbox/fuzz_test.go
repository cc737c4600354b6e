package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Fuzz targets. Each round-trips what validation accepts through a real PostgreSQL (one schema per
// fuzzing process, from testdb), so that "valid" means "storable, and read back unchanged". Plain
// `go test` runs the seeds below and those in testdata/fuzz; to fuzz:
//
//	go test -run='^$' -fuzz=FuzzValidateKey -fuzztime=2m ./inbox

// fuzzEnv is one fuzzing process's schema and client; every input uses a consumer of its own, so
// that inputs never see each other's rows.
type fuzzEnv struct {
	db *testdb.DB
	c  *inbox.Client
	n  atomic.Int64
}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	f.Helper()
	db := testdb.New(f)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzEnv{db: db, c: c}
}

// consumer returns a consumer of its own for t's input, whose rows are deleted when t ends (so
// that a long fuzzing session keeps its schema small, and quick to drop).
func (e *fuzzEnv) consumer(t *testing.T) string {
	c := fmt.Sprintf("fz-%d", e.n.Add(1))
	t.Cleanup(func() {
		_, err := e.db.Pool.Exec(context.Background(), e.db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE consumer = $1)
			DELETE FROM {schema}.inbox WHERE consumer = $1`), c)
		if err != nil {
			t.Error(err)
		}
	})
	return c
}

func (e *fuzzEnv) rows(t *testing.T, consumer string) int64 {
	t.Helper()
	return e.db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1`, consumer)
}

// FuzzValidateKey: ValidateKey accepts exactly the keys of 1 to limits.KeyBytes bytes of valid UTF-8
// without control characters; an accepted key is stored byte for byte, found again as a duplicate,
// and distinct from every other key; a rejected key gets a *ValidationError and writes nothing.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{
		"k", "order-42", "billing:9f1c", "a:b%3Ac", "sha256:" + strings.Repeat("ab", 32), "é", "e\u0301",
		"\U0001F600", "\u2028", "\u200b", "\ufeff", "\ufffe", "\uffff", " ", "  padded  ", `'; DROP TABLE inbox; --`,
		`\`, `"`, "%", "_", strings.Repeat("x", limits.KeyBytes), strings.Repeat("x", limits.KeyBytes+1),
		strings.Repeat("€", 170) + "xy", "", "a\x00b", "\xff", "\xed\xa0\x80", "a\tb", "\x7f", "\u0085",
	} {
		f.Add(s)
	}
	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, key string) {
		ctx := context.Background()
		verr := txinbox.ValidateKey(key)
		if want := keySpec(key); (verr == nil) != want {
			t.Fatalf("ValidateKey(%q) = %v, but the documented rule says valid=%v", key, verr, want)
		}
		consumer := e.consumer(t)
		m := inbox.Message{Consumer: consumer, Key: key, Kind: "fuzz", Payload: []byte(`1`)}
		r, err := e.c.Receive(ctx, m)
		if verr != nil {
			wantInvalid(t, "rejected key", err, 0, "key")
			if n := e.rows(t, consumer); n != 0 {
				t.Fatalf("a rejected key wrote %d rows", n)
			}
			return
		}
		if err != nil || r.Outcome != inbox.Inserted {
			t.Fatalf("valid key %q: %+v, %v", key, r, err)
		}
		got, err := getMessage(ctx, e.db, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Key != key {
			t.Fatalf("key stored as %q, sent %q", got.Key, key)
		}
		d, err := e.c.Receive(ctx, m)
		if err != nil || d.Outcome != inbox.Duplicate || d.ID != r.ID {
			t.Fatalf("redelivery of %q: %+v, %v", key, d, err)
		}
		// Keys are compared byte for byte: a variant (another normalisation, case, padding) is a
		// different message.
		for _, v := range keyVariants(key) {
			vr, err := e.c.Receive(ctx, inbox.Message{Consumer: consumer, Key: v, Kind: "fuzz", Payload: []byte(`1`)})
			if err != nil || vr.Outcome != inbox.Inserted {
				t.Fatalf("variant %q of %q: %+v, %v", v, key, vr, err)
			}
		}
	})
}

// keySpec is the documented key rule, written independently of the implementation.
func keySpec(key string) bool {
	if key == "" || len(key) > limits.KeyBytes || !utf8.ValidString(key) {
		return false
	}
	for _, r := range key {
		if unicode.Is(unicode.Cc, r) {
			return false
		}
	}
	return true
}

// keyVariants returns valid keys that differ from key by bytes but may look alike.
func keyVariants(key string) []string {
	var out []string
	for _, v := range []string{strings.ToUpper(key), strings.ToLower(key), key + " ", " " + key, key + "\u200b"} {
		if v != key && !slices.Contains(out, v) && txinbox.ValidateKey(v) == nil {
			out = append(out, v)
		}
	}
	return out
}

// fuzzMaxPayload is FuzzPayload's payload limit: small, so that numbers printed past it (1e5000) are
// within the fuzzer's reach.
const fuzzMaxPayload = 4096

// FuzzPayload: Validate accepts exactly what payloadSpec (the documented rule, written apart from the
// implementation) accepts; whatever it accepts is stored (a real insert), reads back as the same JSON
// document (numbers compared by value), and a redelivery, byte for byte or as PostgreSQL normalised
// it, is a Duplicate. A rejected payload gets a *ValidationError and writes nothing.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, `0`, `-0`, `1.0`, `1E2`, `1e-7`, `123456789012345678901234567890`,
		`1.5e300`, `1e400`, `-1e-400`, `"é"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\\u0000"`, `"\u0000"`,
		`{"a":1,"a":2}`, `{"b":[1,{"c":null}],"a":"x"}`, ` {"padded" : true} `, "{\"tab\":\t1}",
		`{"k":"\u2028\u2029"}`, `"<>&"`, `[[[[[[[[[[]]]]]]]]]]`, `{"amount": 1}`, ``, `{`, `nul`, "\xff",
		`{"a":"\/"}`, `"\b\f\n\r\t"`, `1.`, `.5`, `01`, `+1`, `NaN`, `{"a" 1}`, "[1,]",
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\\ud800"`, `{"\u0000":1}`, `1e131071`, `1e131072`, `1e-16383`,
		`1e-16384`, `0.0e-16383`, `0e1073741823`, `1e4094`, `1e4095`, `[1e99,1e99]`, `-0.0`, `1E+02`,
	} {
		f.Add([]byte(s))
	}
	e := newFuzzEnv(f)
	c, err := inbox.New(e.db.Store(), inbox.Config{MaxPayloadBytes: fuzzMaxPayload})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		ctx := context.Background()
		consumer := e.consumer(t)
		m := inbox.Message{Consumer: consumer, Key: "p", Kind: "fuzz", Payload: payload}
		verr := c.Validate(m)
		if why := payloadSpec(payload, fuzzMaxPayload); (verr == nil) != (why == "") {
			t.Fatalf("Validate(%q) = %v, but the documented rule says %q", payload, verr, why)
		}
		r, err := c.Receive(ctx, m)
		if verr != nil {
			wantInvalid(t, "rejected payload", err, 0, "payload")
			if n := e.rows(t, consumer); n != 0 {
				t.Fatalf("a rejected payload wrote %d rows", n)
			}
			return
		}
		if err != nil {
			t.Fatalf("Validate accepted %q but it could not be stored: %v", payload, err)
		}
		if r.Outcome != inbox.Inserted {
			t.Fatalf("receipt %+v", r)
		}
		got, err := getMessage(ctx, e.db, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !sameJSON(t, payload, got.Payload) {
			t.Fatalf("payload %q stored as %q", payload, got.Payload)
		}
		for _, again := range [][]byte{payload, got.Payload} {
			d, err := c.Receive(ctx, inbox.Message{Consumer: consumer, Key: "p", Kind: "fuzz", Payload: again})
			if err != nil || d.Outcome != inbox.Duplicate || d.ID != r.ID {
				t.Fatalf("redelivery as %q: %+v, %v", again, d, err)
			}
		}
	})
}

// FuzzBatchDuplicate: a key received twice, with payloads a then b, gets the same outcome for b
// (Duplicate or Conflict) whether the two arrive in separate calls (compared by PostgreSQL, as jsonb)
// or in one ReceiveMany batch (compared in Go). Both agree with jsonbSame, this file's model of the
// comparison.
func FuzzBatchDuplicate(f *testing.F) {
	for _, p := range [][2]string{
		{`{"a":1}`, `{"a":1}`}, {`{"a":1}`, `{"a":2}`}, {`{"a":1,"b":2}`, `{"b":2,"a":1}`}, {`[1,2]`, `[2,1]`},
		{`"é"`, `"\u00e9"`}, {`1.0`, `1`}, {`{"a":1,"a":2}`, `{"a":2}`}, {`null`, `{}`}, {`" x"`, `"x"`},
		{`100`, `100`}, {`0.5`, `0.50`},
		// Numbers compare as PostgreSQL numeric prints them (these were in-batch Conflicts once).
		{`1E2`, `100`}, {`-0`, `0`}, {`-0.0`, `0.0`}, {`1.5e1`, `15`}, {`1.25e1`, `12.5`}, {`1e-2`, `0.01`},
		{`0.000e5`, `0`}, {`{"n":[1E+2,-0]}`, `{"n":[100,0]}`}, {`12e-1`, `1.2`}, {`1e2`, `100.0`},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ctx := context.Background()
		consumer := e.consumer(t)
		msg := func(key string, p []byte) inbox.Message {
			return inbox.Message{Consumer: consumer, Key: key, Kind: "fuzz", Payload: p}
		}
		if e.c.Validate(msg("k", a)) != nil || e.c.Validate(msg("k", b)) != nil ||
			knownUnstorable(a) != "" || knownUnstorable(b) != "" {
			return // FuzzPayload covers these
		}
		want := inbox.Conflict
		if jsonbSame(t, a, b) {
			want = inbox.Duplicate
		}
		if _, err := e.c.Receive(ctx, msg("separate", a)); err != nil {
			t.Fatal(err)
		}
		sep, err := e.c.Receive(ctx, msg("separate", b))
		if err != nil && !errors.Is(err, inbox.ErrKeyConflict) {
			t.Fatal(err)
		}
		if sep.Outcome != want {
			t.Fatalf("separate calls: %q then %q: %v, the jsonb model says %v", a, b, sep.Outcome, want)
		}
		rs, err := e.c.ReceiveMany(ctx, []inbox.Message{msg("batch", a), msg("batch", b)})
		if err != nil {
			t.Fatal(err)
		}
		if rs[1].Outcome != sep.Outcome {
			t.Fatalf("%q then %q: %v in one batch, %v in separate calls", a, b, rs[1].Outcome, sep.Outcome)
		}
	})
}

// FuzzHeaders: a headers map that validation accepts is stored and read back unchanged; a rejected
// one gets a *ValidationError naming headers and writes nothing.
func FuzzHeaders(f *testing.F) {
	for _, h := range [][4]string{
		{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "content-type", "application/json"},
		{"x", "", "y", "é\u2028<>&\"\\"}, {"", "v", "a", "b"}, {"a\x00", "v", "b", "c"}, {"a", "\xff", "b", "c"},
		{strings.Repeat("n", 256), strings.Repeat("v", 8192), "k", "v"}, {strings.Repeat("n", 257), "v", "k", "v"},
		{"k", strings.Repeat("v", 8193), "k2", "v"}, {"same", "1", "same", "2"}, {"\u0085", "v", "k", "v"},
		{"k", "line\nbreak", "k2", "v"}, {"{", "}", "\"", "'"},
	} {
		f.Add(h[0], h[1], h[2], h[3])
	}
	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		ctx := context.Background()
		h := map[string]string{k1: v1, k2: v2}
		consumer := e.consumer(t)
		m := inbox.Message{Consumer: consumer, Key: "h", Kind: "fuzz", Payload: []byte(`{}`), Headers: h}
		verr := e.c.Validate(m)
		if want := headerSpec(h); (verr == nil) != want {
			t.Fatalf("Validate(headers %q) = %v, but the documented rule says valid=%v", h, verr, want)
		}
		r, err := e.c.Receive(ctx, m)
		if verr != nil {
			wantInvalid(t, "rejected headers", err, 0, "headers")
			if n := e.rows(t, consumer); n != 0 {
				t.Fatalf("rejected headers wrote %d rows", n)
			}
			return
		}
		if err != nil {
			t.Fatalf("headers %q accepted but not stored: %v", h, err)
		}
		got, err := getMessage(ctx, e.db, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Headers, h) {
			t.Fatalf("headers %q read back as %q", h, got.Headers)
		}
	})
}

// headerSpec is the headers rule: names of 1 to 256 bytes, values of at most 8192 bytes, both valid
// UTF-8 without control characters.
func headerSpec(h map[string]string) bool {
	text := func(s string, maxBytes int, empty bool) bool {
		if (s == "" && !empty) || len(s) > maxBytes || !utf8.ValidString(s) {
			return false
		}
		return !strings.ContainsFunc(s, func(r rune) bool { return unicode.Is(unicode.Cc, r) })
	}
	for k, v := range h {
		if !text(k, 256, false) || !text(v, 8192, true) {
			return false
		}
	}
	return true
}

// sameJSON reports whether two JSON documents are equal by value (numbers compared as exact
// decimals; for duplicate object keys the last one counts, as in jsonb).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	va, err := decodeJSON(a)
	if err != nil {
		t.Fatalf("decode %q: %v", a, err)
	}
	vb, err := decodeJSON(b)
	if err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return equalValues(va, vb)
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	return v, d.Decode(&v)
}

func equalValues(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, oka := new(big.Rat).SetString(string(a))
		rb, okb := new(big.Rat).SetString(string(bn))
		return oka && okb && ra.Cmp(rb) == 0
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			if w, ok := bm[k]; !ok || !equalValues(v, w) {
				return false
			}
		}
		return true
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return false
		}
		for i := range a {
			if !equalValues(a[i], bs[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// jsonbSame models the fingerprint comparison of stored messages: two payloads are the same when
// their jsonb text is, where a number is printed as PostgreSQL numeric prints it (its value with as
// many decimals as its literal has after applying the exponent: 1E2 is 100, 1.0 is 1.0, -0 is 0).
func jsonbSame(t *testing.T, a, b []byte) bool {
	t.Helper()
	ca, err := jsonbText(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := jsonbText(b)
	if err != nil {
		t.Fatal(err)
	}
	return ca == cb
}

// jsonbText returns a canonical form of a JSON document in which two documents are equal exactly
// when their jsonb text is: numbers are replaced by numericCanon (a marker key that no valid payload
// can hold, since it contains NUL).
func jsonbText(b []byte) (string, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return "", err
	}
	var canon func(v any) any
	canon = func(v any) any {
		switch v := v.(type) {
		case json.Number:
			c, _ := numericCanon(string(v))
			return map[string]string{"\x00num": c}
		case map[string]any:
			for k, w := range v {
				v[k] = canon(w)
			}
		case []any:
			for i, w := range v {
				v[i] = canon(w)
			}
		}
		return v
	}
	out, err := json.Marshal(canon(v))
	return string(out), err
}

// PostgreSQL numeric limits (src/include/utils/numeric.h, numeric.c): at most 131072 decimal digits
// before the decimal point (NUMERIC_WEIGHT_MAX base-10000 digits), at most 16383 after it
// (NUMERIC_DSCALE_MAX), and an exponent below INT_MAX/2 in magnitude (set_var_from_str).
const (
	pgMaxIntDigits = 131072
	pgMaxScale     = 16383
	pgMaxExponent  = 1<<30 - 1
)

// numericCanon describes how PostgreSQL numeric stores the JSON number literal lit: two literals
// print alike in jsonb exactly when their descriptions are equal (same value, same display scale:
// 1E2 and 100 alike, 1.0 and 1 not, -0 and 0 alike). fits reports whether numeric can hold it at all.
func numericCanon(lit string) (canon string, fits bool) {
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant = lit[:i]
		e, err := strconv.Atoi(lit[i+1:])
		if err != nil || e >= pgMaxExponent || e <= -pgMaxExponent {
			return lit, false
		}
		exp = e
	}
	neg := strings.HasPrefix(mant, "-")
	intPart, frac, _ := strings.Cut(strings.TrimPrefix(mant, "-"), ".")
	scale := max(0, len(frac)-exp) // the display scale: digits printed after the decimal point
	digits := intPart + frac
	sig := strings.TrimLeft(digits, "0")
	if sig == "" {
		return fmt.Sprintf("0/%d", scale), scale <= pgMaxScale
	}
	lead := len(digits) - len(sig)
	e10 := len(intPart) - 1 - lead + exp // decimal exponent of the leading significant digit
	sign := ""
	if neg {
		sign = "-"
	}
	return fmt.Sprintf("%s%se%d/%d", sign, strings.TrimRight(sig, "0"), e10, scale), e10 < pgMaxIntDigits && scale <= pgMaxScale
}

// knownUnstorable names the class of a payload that json.Valid accepts but PostgreSQL jsonb refuses,
// or returns "": a lone UTF-16 surrogate escape, a \u0000 escape, or a number outside numeric's range.
func knownUnstorable(p []byte) string {
	if !json.Valid(p) {
		return ""
	}
	if hasLoneSurrogate(p) {
		return "lone surrogate escape"
	}
	if hasNULEscape(p) {
		return `\u0000 escape`
	}
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err != nil {
			return ""
		}
		if n, ok := tok.(json.Number); ok {
			if _, fits := numericCanon(string(n)); !fits {
				return "number out of numeric range"
			}
		}
	}
}

// payloadSpec is the documented payload rule, written apart from the implementation: it returns why
// p is invalid, or "". Valid: non-empty, valid UTF-8 and JSON, nothing jsonb refuses
// (knownUnstorable), and at most maxBytes bytes with every number counted at its printed length
// (numeric's text, computed here with math/big).
func payloadSpec(p []byte, maxBytes int) string {
	switch {
	case len(p) == 0 || len(p) > maxBytes:
		return "size"
	case !utf8.Valid(p) || !json.Valid(p):
		return "not JSON"
	}
	if why := knownUnstorable(p); why != "" {
		return why
	}
	size := len(p)
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if n, ok := tok.(json.Number); ok {
			size += len(printedNumeric(string(n))) - len(n)
		}
	}
	if size > maxBytes {
		return "numbers printed past the limit"
	}
	return ""
}

// printedNumeric is the text PostgreSQL numeric prints for a JSON number literal that fits: its
// exact value with as many decimals as the literal has after applying the exponent.
func printedNumeric(lit string) string {
	r, ok := new(big.Rat).SetString(lit)
	if !ok {
		panic("not a number: " + lit)
	}
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant = lit[:i]
		exp, _ = strconv.Atoi(lit[i+1:])
	}
	_, frac, _ := strings.Cut(mant, ".")
	return r.FloatString(max(0, len(frac)-exp))
}

// hasNULEscape reports whether valid JSON text contains the escape \u0000 (not an escaped backslash
// followed by "u0000").
func hasNULEscape(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u0000`))
		if i < 0 {
			return false
		}
		backslashes := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return true
		}
		b = b[i+1:]
	}
}

// hasLoneSurrogate reports whether valid JSON text holds a \uD800-\uDFFF escape that is not a high
// surrogate escape followed by a low one (PostgreSQL rejects those; Go turns them into U+FFFD).
func hasLoneSurrogate(p []byte) bool {
	hex := func(b []byte) (rune, bool) {
		if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[2:6]), 16, 32)
		return rune(v), err == nil
	}
	inString := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			r, ok := hex(p[i:])
			if !ok {
				i++ // a two-character escape
				continue
			}
			switch {
			case r >= 0xD800 && r < 0xDC00:
				lo, ok := rune(0), false
				if i+6 <= len(p) {
					lo, ok = hex(p[i+6:])
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 11
			case r >= 0xDC00 && r <= 0xDFFF:
				return true
			default:
				i += 5
			}
		}
	}
	return false
}
