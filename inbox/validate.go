package inbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
)

// Limits of a message, documented on the fields they bound.
const (
	maxOrderingKeyBytes    = 512     // Message.OrderingKey
	defaultMaxPayloadBytes = 1 << 20 // Config.MaxPayloadBytes
)

// PostgreSQL numeric's limits (numeric.c): at most 131072 digits before the decimal point, at most
// 16383 after it (the display scale, counted from the literal: 1.0e-3 has scale 4), and an exponent
// below 2^30-1 in magnitude. A JSON number outside them makes jsonb input fail.
const (
	numericMaxIntDigits = 131072
	numericMaxScale     = 16383
	numericMaxExponent  = 1<<30 - 1
)

// validatePayload checks that payload can be stored in a jsonb column: valid JSON, valid UTF-8, within
// maxBytes, and nothing that jsonb refuses or blows up (checkJSONText).
func validatePayload(payload []byte, maxBytes int) error {
	switch {
	case len(payload) == 0:
		return fmt.Errorf("must not be empty (use null, {} or another JSON value)")
	case len(payload) > maxBytes:
		return fmt.Errorf("is %d bytes, more than the limit of %d", len(payload), maxBytes)
	case !utf8.Valid(payload):
		return fmt.Errorf("is not valid UTF-8")
	case !json.Valid(payload):
		return fmt.Errorf("is not valid JSON")
	}
	return checkJSONText(payload, maxBytes)
}

// checkJSONText checks valid JSON text for what PostgreSQL jsonb cannot hold or would enlarge:
//
//   - the escape \u0000 (jsonb text cannot hold NUL);
//   - a UTF-16 surrogate escape (\uD800-\uDFFF) that is not a high surrogate followed by a low one;
//   - a number outside numeric's range (numericMaxIntDigits, numericMaxScale, numericMaxExponent);
//   - numbers that, as numeric stores and prints them (1e6 is 1000000, 1e-6 is 0.000001), make the
//     payload larger than maxBytes: the payload's size counts each number at its printed length, so
//     that 8 bytes such as 1e131071 cannot cost 131072 bytes (and their CPU) on every comparison.
func checkJSONText(p []byte, maxBytes int) error {
	size := len(p) // the payload's size with its numbers written out
	for i := 0; i < len(p); {
		switch c := p[i]; {
		case c == '"':
			j, err := checkString(p, i)
			if err != nil {
				return err
			}
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(p) && isNumberByte(p[j]) {
				j++
			}
			lit := p[i:j]
			n, err := numericPrintedLen(lit)
			if err != nil {
				return fmt.Errorf("number %q at byte %d %v", truncate(string(lit)), i, err)
			}
			size += n - len(lit)
			i = j
		default:
			i++
		}
	}
	if size > maxBytes {
		return fmt.Errorf("is %d bytes with its numbers written out as PostgreSQL stores them (1e6 as 1000000), more than the limit of %d", size, maxBytes)
	}
	return nil
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// checkString checks the JSON string starting at p[i] (its opening quote) and returns the index after
// its closing quote.
func checkString(p []byte, i int) (int, error) {
	for j := i + 1; j < len(p); j++ {
		switch p[j] {
		case '"':
			return j + 1, nil
		case '\\':
			r, ok := unicodeEscape(p[j:])
			if !ok { // a two-character escape such as \n or \"
				j++
				continue
			}
			switch {
			case r == 0:
				return 0, fmt.Errorf(`contains \u0000 at byte %d, which PostgreSQL jsonb cannot store`, j)
			case r >= 0xD800 && r < 0xDC00:
				lo, ok := rune(0), false
				if j+6 <= len(p) {
					lo, ok = unicodeEscape(p[j+6:])
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return 0, fmt.Errorf(`contains a lone UTF-16 surrogate escape %s at byte %d, which PostgreSQL jsonb cannot store`, p[j:j+6], j)
				}
				j += 11
			case r >= 0xDC00 && r <= 0xDFFF:
				return 0, fmt.Errorf(`contains a lone UTF-16 surrogate escape %s at byte %d, which PostgreSQL jsonb cannot store`, p[j:j+6], j)
			default:
				j += 5
			}
		}
	}
	return len(p), nil // not reached for valid JSON
}

// unicodeEscape decodes a \uXXXX escape at the start of b.
func unicodeEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// splitNumber splits the valid JSON number lit into its sign, the digits before and after its
// decimal point and its exponent, or returns an error if the exponent is outside PostgreSQL
// numeric's range.
func splitNumber(lit []byte) (neg bool, intPart, frac []byte, exp int, err error) {
	mant := lit
	if k := bytes.IndexAny(lit, "eE"); k >= 0 {
		mant = lit[:k]
		e := lit[k+1:]
		negExp := len(e) > 0 && e[0] == '-'
		if len(e) > 0 && (e[0] == '-' || e[0] == '+') {
			e = e[1:]
		}
		e = bytes.TrimLeft(e, "0")
		if len(e) > 10 {
			return false, nil, nil, 0, fmt.Errorf("has an exponent outside PostgreSQL numeric's range")
		}
		for _, c := range e {
			exp = exp*10 + int(c-'0')
		}
		if exp >= numericMaxExponent {
			return false, nil, nil, 0, fmt.Errorf("has an exponent outside PostgreSQL numeric's range")
		}
		if negExp {
			exp = -exp
		}
	}
	neg = len(mant) > 0 && mant[0] == '-'
	if neg {
		mant = mant[1:]
	}
	intPart, frac, _ = bytes.Cut(mant, []byte("."))
	return neg, intPart, frac, exp, nil
}

// numericPrintedLen returns the length of the JSON number lit as PostgreSQL numeric prints it, or an
// error if numeric cannot hold it. It builds nothing: a short literal such as 1e100000 must cost its
// length, not what it prints.
func numericPrintedLen(lit []byte) (int, error) {
	neg, intPart, frac, exp, err := splitNumber(lit)
	if err != nil {
		return 0, err
	}
	scale := max(0, len(frac)-exp) // digits printed after the decimal point
	if scale > numericMaxScale {
		return 0, fmt.Errorf("has %d digits after the decimal point, more than PostgreSQL numeric's %d", scale, numericMaxScale)
	}
	n := 1 // digits before the decimal point: at least "0"
	lead := 0
	for lead < len(intPart) && intPart[lead] == '0' {
		lead++
	}
	if lead == len(intPart) {
		for k := 0; k < len(frac) && frac[k] == '0'; k++ {
			lead++
		}
	}
	if lead < len(intPart)+len(frac) { // not zero
		if e10 := len(intPart) - 1 - lead + exp; e10 >= 0 {
			if e10 >= numericMaxIntDigits {
				return 0, fmt.Errorf("has %d digits before the decimal point, more than PostgreSQL numeric's %d", e10+1, numericMaxIntDigits)
			}
			n = e10 + 1
		}
		if neg {
			n++
		}
	}
	if scale > 0 {
		n += 1 + scale
	}
	return n, nil
}

func validateHeaders(h map[string]string) error {
	total := 0
	for k, v := range h {
		if err := textcheck.Check(k, limits.HeaderNameBytes, false); err != nil {
			return fmt.Errorf("name %q %v", truncate(k), err)
		}
		if err := textcheck.Check(v, limits.HeaderValueBytes, true); err != nil {
			return fmt.Errorf("%q value %v", truncate(k), err)
		}
		total += len(k) + len(v)
	}
	if total > limits.HeadersBytes {
		return fmt.Errorf("%d headers of %d bytes (names and values), more than the limit of %d", len(h), total, limits.HeadersBytes)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
