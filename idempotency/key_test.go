package idempotency_test

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/txinbox/txinbox/idempotency"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	valid := map[string]string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`: "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`8e03978e-40d5-43e8-bc93-6894a57f9324`:   "8e03978e-40d5-43e8-bc93-6894a57f9324",
		` "abc"	`:                                "abc",
		`"with space"`:                           "with space",
		`"q\"uote\\d"`:                           `q"uote\d`,
		`"k";a=1;b="x";c;d=?0;e=:AQID:;f=tok/x:y;g=-1.5;h=@123;i=%"caf%c3%a9"`: "k",
		`"` + strings.Repeat("x", 255) + `"`:                                   strings.Repeat("x", 255),
		strings.Repeat("y", 255):                                               strings.Repeat("y", 255),
		`"k";a=%"\\"`:                                                          "k", // a backslash is ordinary in a display string
		`abc:/+=._~!`:                                                          `abc:/+=._~!`,
	}
	for in, want := range valid {
		got, err := idempotency.ParseKey(in)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	invalid := []string{
		"", "   ", `""`, `"abc`, `"a\b"`, `"abc"x`, `"abc", "def"`, `abc, def`, `abc def`, `a;b`, `a"b`, `a\b`,
		`"` + strings.Repeat("x", 256) + `"`, strings.Repeat("y", 256), "\"tab\there\"", `"é"`, "é",
		`"k";`, `"k";A=1`, `"k";a=`, `"k";a=1.2345`, `"k";a=1234567890123456`, `"k";a=:a`, `"k";a=?2`,
		`"k";a=%"%C3"`, `"k";a="x`, `"k";a=@1.5`, `"k" ;a=1`,
		`"k";a=%"%c3"`, `"k";a=:a:`, `"k";a=:====:`, // RFC 9651: display strings are UTF-8; byte sequences base64
	}
	for _, in := range invalid {
		got, err := idempotency.ParseKey(in)
		if err == nil || !errors.Is(err, idempotency.ErrInvalidKey) || idempotency.InvalidKeyReason(err) == "" {
			t.Errorf("ParseKey(%q) = %q, %v; want an invalid key error with its reason", in, got, err)
		}
	}
}

func TestFormatKey(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"abc", `q"uote\d`, "with space", " "} {
		got, err := idempotency.ParseKey(idempotency.FormatKey(k))
		if err != nil || got != k {
			t.Errorf("round trip of %q: %q %v", k, got, err)
		}
	}
}

// verdict is what keyOracle says of a header value.
type verdict int

const (
	rejected verdict = iota
	accepted         // with the key keyOracle returns
)

// The grammar of RFC 9651 (Structured Field Values, which obsoletes RFC 8941) for an Item whose bare
// item is a String, written as regular expressions: an implementation independent of ParseKey's
// hand-written scanner.
var (
	sfString  = `"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"`      // 3.3.3: escapes are \" and \\ only
	sfKey     = `[a-z*][a-z0-9_.*-]*`                                // 3.1.2
	sfDisplay = `%"((?:[\x20\x21\x23\x24\x26-\x7e]|%[0-9a-f]{2})*)"` // 3.3.8 and 4.2.10: "\" is itself
	sfBytes   = `:([A-Za-z0-9+/=]*):`                                // 3.3.5 and 4.2.7
	sfBare    = `-?[0-9]{1,12}\.[0-9]{1,3}|-?[0-9]{1,15}|` + sfString + `|[A-Za-z*][-!#$%&'*+.^_\x60|~0-9A-Za-z:/]*|` +
		sfBytes + `|\?[01]|@-?[0-9]{1,15}|` + sfDisplay // 3.3: decimal, integer, string, token, bytes, boolean, date, display string
	itemRE  = regexp.MustCompile(`^` + sfString + `((?:;\x20*` + sfKey + `(?:=(?:` + sfBare + `))?)*)$`)
	paramRE = regexp.MustCompile(`;\x20*` + sfKey + `(?:=(?:` + sfBare + `))?`)
	// bareKeyRE is the unquoted form ParseKey's documentation accepts: visible ASCII but for the
	// double quote, backslash, comma and semicolon.
	bareKeyRE   = regexp.MustCompile(`^[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]{1,255}$`)
	unescapeRE  = regexp.MustCompile(`\\(["\\])`)
	displayRE   = regexp.MustCompile(`^` + sfDisplay + `$`)
	pctRE       = regexp.MustCompile(`%([0-9a-f]{2})`)
	bytesOnlyRE = regexp.MustCompile(`^` + sfBytes + `$`)
)

// keyOracle says whether ParseKey must accept value, and with which key, from the grammar alone:
// after the spaces and tabs around the value are dropped, either an RFC 9651 Item whose bare item is a
// String of 1 to 255 characters (its parameters valid and ignored), or a bare key of 1 to 255
// characters of bareKeyRE. A Display String parameter must decode to UTF-8 (4.2.10; a backslash in it
// is an ordinary character) and a Byte Sequence parameter must be base64 (4.2.7, padding optional).
func keyOracle(value string) (string, verdict) {
	s := strings.Trim(value, " \t")
	if bareKeyRE.MatchString(s) {
		return s, accepted
	}
	m := itemRE.FindStringSubmatch(s)
	if m == nil {
		return "", rejected
	}
	key := unescapeRE.ReplaceAllString(m[1], "$1")
	if key == "" || len(key) > 255 {
		return "", rejected
	}
	for _, p := range paramRE.FindAllString(m[2], -1) {
		eq := strings.IndexByte(p, '=') // keys hold no '='
		if eq < 0 {
			continue
		}
		v := p[eq+1:]
		if d := displayRE.FindStringSubmatch(v); d != nil {
			decoded := pctRE.ReplaceAllStringFunc(d[1], func(e string) string {
				b, _ := strconv.ParseUint(e[1:], 16, 8)
				return string([]byte{byte(b)})
			})
			if !utf8.ValidString(decoded) {
				return "", rejected
			}
		}
		if b := bytesOnlyRE.FindStringSubmatch(v); b != nil {
			if _, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(b[1], "=")); err != nil || strings.Count(b[1], "=") > 2 {
				return "", rejected
			}
		}
	}
	return key, accepted
}

// TestKeyOracle checks the oracle of FuzzParseKey against hand-picked values.
func TestKeyOracle(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`"abc"`: "abc", `abc`: "abc", ` "a b"	`: "a b", `"q\"u\\d"`: `q"u\d`, `"k";a=1;b;c=?1;d=tok:/x;e="s";f=:AQID:;g=-1.5;h=@-1;i=%"caf%c3%a9"`: "k",
		`"k";a=:AQ:`: "k", `"k"; a=1`: "k", `:abc:`: ":abc:", `?1`: "?1",
	} {
		if got, v := keyOracle(in); v != accepted || got != want {
			t.Errorf("keyOracle(%q) = %q, %v; want %q accepted", in, got, v, want)
		}
	}
	for _, in := range []string{
		"", `""`, `"a`, `"a\b"`, `"a"x`, `"a", "b"`, `a,b`, `a;b`, `a b`, `"é"`, "\"a\x01\"", `"k" ;a=1`, `"k";A=1`, `"k";a=`,
		`"k";a=1.2345`, `"k";a=1234567890123456`, `"k";a=@1.5`, `"k";a=%"%C3"`, `"k";a=:a b:`, `"k";a=?2`, `"k";`,
		`"` + strings.Repeat("x", 256) + `"`, strings.Repeat("y", 256),
	} {
		if got, v := keyOracle(in); v != rejected {
			t.Errorf("keyOracle(%q) = %q, %v; want rejected", in, got, v)
		}
	}
	if got, v := keyOracle(`"k";a=%"\"`); v != accepted || got != "k" {
		t.Errorf("keyOracle of a display string holding a backslash = %q, %v; want k accepted", got, v)
	}
	for _, in := range []string{`"k";a=%"%c3"`, `"k";a=:a:`, `"k";a=:====:`} {
		if got, v := keyOracle(in); v != rejected {
			t.Errorf("keyOracle(%q) = %q, %v; want rejected", in, got, v)
		}
	}
}

// FuzzParseKey checks ParseKey against keyOracle: a value the grammar accepts must parse to the
// oracle's key, and survive a FormatKey round trip; a value it rejects must be refused with a
// key error. Every 1 to 255 printable ASCII characters, as a key, must survive FormatKey and ParseKey.
// Seeds are in testdata/fuzz/FuzzParseKey and below; plain `go test` runs them.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, `"k";a=1`, `""`, `"a", "b"`, "\x00", `"` + strings.Repeat("z", 256) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, err := idempotency.ParseKey(s)
		if err != nil {
			if !errors.Is(err, idempotency.ErrInvalidKey) || idempotency.InvalidKeyReason(err) == "" {
				t.Fatalf("ParseKey(%q): error %v is not an invalid key error", s, err)
			}
		}
		switch want, v := keyOracle(s); {
		case v == accepted && (err != nil || key != want):
			t.Fatalf("ParseKey(%q) = %q, %v; the grammar accepts it as %q", s, key, err, want)
		case v == rejected && err == nil:
			t.Fatalf("ParseKey(%q) = %q; the grammar rejects it", s, key)
		}
		if err == nil {
			if again, err := idempotency.ParseKey(idempotency.FormatKey(key)); err != nil || again != key {
				t.Fatalf("round trip of %q: %q %v", key, again, err)
			}
		}
		// s itself as a key: valid keys are 1 to 255 printable ASCII characters.
		valid := len(s) >= 1 && len(s) <= maxKeyLength
		for i := 0; i < len(s); i++ {
			valid = valid && s[i] >= 0x20 && s[i] <= 0x7e
		}
		got, err := idempotency.ParseKey(idempotency.FormatKey(s))
		if valid != (err == nil) || (valid && got != s) {
			t.Fatalf("ParseKey(FormatKey(%q)) = %q, %v; valid key: %v", s, got, err, valid)
		}
	})
}
