package idempotency_test

import (
	"errors"
	"strings"
	"testing"

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
		`"k";a=%"%C3"`, `"k";a=%"\\"`, `"k";a="x`, `"k";a=@1.5`, `"k" ;a=1`,
	}
	for _, in := range invalid {
		got, err := idempotency.ParseKey(in)
		var ke *idempotency.KeyError
		if err == nil || !errors.Is(err, idempotency.ErrInvalidKey) || !errors.As(err, &ke) || ke.Reason == "" {
			t.Errorf("ParseKey(%q) = %q, %v; want a *KeyError", in, got, err)
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

// FuzzParseKey checks that ParseKey never panics, that every key it returns is valid (1 to 255
// printable ASCII characters) and survives a FormatKey round trip, and that every error is a
// *KeyError. Seeds are in testdata/fuzz/FuzzParseKey and below; plain `go test` runs them.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, `"k";a=1`, `""`, `"a", "b"`, "\x00", `"` + strings.Repeat("z", 256) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, err := idempotency.ParseKey(s)
		if err != nil {
			var ke *idempotency.KeyError
			if !errors.Is(err, idempotency.ErrInvalidKey) || !errors.As(err, &ke) {
				t.Fatalf("ParseKey(%q): error %v is not a *KeyError", s, err)
			}
			return
		}
		if len(key) < 1 || len(key) > idempotency.MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d", s, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %d not printable", s, key, i)
			}
		}
		again, err := idempotency.ParseKey(idempotency.FormatKey(key))
		if err != nil || again != key {
			t.Fatalf("round trip of %q: %q %v", key, again, err)
		}
	})
}
