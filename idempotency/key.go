package idempotency

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// HeaderKey is the request header carrying the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on a response replayed from the store.
const HeaderReplayed = "Idempotent-Replayed"

// maxKeyLength is the longest key accepted, in bytes (characters: keys are ASCII).
const maxKeyLength = 255

// ErrInvalidKey is matched (errors.Is) by every error of [ParseKey].
var ErrInvalidKey = errors.New("idempotency: invalid Idempotency-Key")

// invalidKeyError reports an Idempotency-Key header value that ParseKey rejected, and why.
type invalidKeyError struct {
	value  string // the header value, cut to 64 bytes
	reason string
}

func (e *invalidKeyError) Error() string {
	return fmt.Sprintf("idempotency: invalid Idempotency-Key %q: %s", e.value, e.reason)
}

// Is reports whether target is ErrInvalidKey.
func (e *invalidKeyError) Is(target error) bool { return target == ErrInvalidKey }

func keyError(value, format string, args ...any) error {
	if len(value) > 64 {
		value = value[:64] + "..."
	}
	return &invalidKeyError{value: value, reason: fmt.Sprintf(format, args...)}
}

// ParseKey parses the value of an Idempotency-Key header (several field lines joined with ", ") and
// returns the key. Two forms are accepted:
//
//   - the standard form, a Structured Field Item (RFC 9651) whose value is a String:
//     `"8e03978e-40d5-43e8-bc93-6894a57f9324"`. Backslash escapes (\" and \\) are decoded;
//     parameters (`"k";a=1`) are parsed and ignored.
//   - a bare key, for clients that do not quote: `8e03978e-40d5-43e8-bc93-6894a57f9324`. It is
//     taken as is; it must consist of visible ASCII characters (0x21-0x7E) other than the double
//     quote, backslash, comma and semicolon, and cannot carry parameters.
//
// Leading and trailing spaces and tabs are ignored. The key must be 1 to 255 characters of
// printable ASCII (0x20-0x7E; spaces only in the quoted form). Several values (a list, or the header
// sent twice) are rejected. Every error matches [ErrInvalidKey] (errors.Is) and says why the value
// was rejected.
func ParseKey(value string) (string, error) {
	s := strings.Trim(value, " \t")
	if s == "" {
		return "", keyError(value, "empty value")
	}
	var key string
	if s[0] == '"' {
		k, rest, err := parseString(s)
		if err != nil {
			return "", keyError(value, "%s", err)
		}
		rest, err = skipParameters(rest)
		if err != nil {
			return "", keyError(value, "%s", err)
		}
		if rest != "" {
			if strings.HasPrefix(strings.TrimLeft(rest, " \t"), ",") {
				return "", keyError(value, "more than one value (send the header once, with one key)")
			}
			return "", keyError(value, "unexpected %q after the key", rest)
		}
		key = k
	} else {
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c == ',':
				return "", keyError(value, "more than one value (send the header once, with one key)")
			case c < 0x21 || c > 0x7e || c == '"' || c == '\\' || c == ';':
				return "", keyError(value, "character %q at byte %d is not allowed in an unquoted key (quote it as a Structured Field String)", c, i)
			}
		}
		key = s
	}
	if err := validateKey(key); err != nil {
		return "", keyError(value, "%s", err)
	}
	return key, nil
}

func validateKey(key string) error {
	switch {
	case key == "":
		return errors.New("the key is empty")
	case len(key) > maxKeyLength:
		return fmt.Errorf("the key is %d characters, more than %d", len(key), maxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("character %q at byte %d is not printable ASCII", key[i], i)
		}
	}
	return nil
}

// FormatKey returns key as a Structured Field String, the standard form of the Idempotency-Key header
// value (`"abc"`), escaping double quotes and backslashes. It does not validate key.
func FormatKey(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// parseString parses an sf-string at the start of s (RFC 9651 section 4.2.5) and returns its decoded
// value and the rest of s.
func parseString(s string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) {
				return "", "", errors.New("unterminated string")
			}
			if s[i] != '"' && s[i] != '\\' {
				return "", "", fmt.Errorf("invalid escape \\%c at byte %d", s[i], i)
			}
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), s[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", fmt.Errorf("character %q at byte %d is not allowed in a string", c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated string (missing closing double quote)")
}

// skipParameters parses the parameters of an Item (RFC 9651 section 4.2.3.2) at the start of s and
// returns the rest of s.
func skipParameters(s string) (string, error) {
	for len(s) > 0 && s[0] == ';' {
		s = strings.TrimLeft(s[1:], " ")
		if s == "" || !(isLCAlpha(s[0]) || s[0] == '*') {
			return "", errors.New("invalid parameter name")
		}
		i := 1
		for i < len(s) && (isLCAlpha(s[i]) || isDigit(s[i]) || strings.IndexByte("_-.*", s[i]) >= 0) {
			i++
		}
		s = s[i:]
		if len(s) > 0 && s[0] == '=' {
			var err error
			if s, err = skipBareItem(s[1:]); err != nil {
				return "", fmt.Errorf("invalid parameter value: %w", err)
			}
		}
	}
	return s, nil
}

// skipBareItem parses one bare item (RFC 9651 section 4.2.3.1) at the start of s and returns the rest.
func skipBareItem(s string) (string, error) {
	if s == "" {
		return "", errors.New("missing value")
	}
	switch c := s[0]; {
	case c == '-' || isDigit(c):
		return skipNumber(s)
	case c == '"':
		_, rest, err := parseString(s)
		return rest, err
	case isAlpha(c) || c == '*':
		i := 1
		for i < len(s) && (isTChar(s[i]) || s[i] == ':' || s[i] == '/') {
			i++
		}
		return s[i:], nil
	case c == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 {
			return "", errors.New("unterminated byte sequence")
		}
		for i := 1; i <= end; i++ {
			if !isAlpha(s[i]) && !isDigit(s[i]) && s[i] != '+' && s[i] != '/' && s[i] != '=' {
				return "", errors.New("invalid byte sequence")
			}
		}
		// RFC 9651 4.2.7: the content must decode as base64; missing "=" padding is tolerated.
		b64 := strings.TrimRight(s[1:end+1], "=")
		if _, err := base64.RawStdEncoding.DecodeString(b64); err != nil || end-len(b64) > 2 {
			return "", errors.New("byte sequence is not base64")
		}
		return s[end+2:], nil
	case c == '?':
		if len(s) < 2 || (s[1] != '0' && s[1] != '1') {
			return "", errors.New("invalid boolean")
		}
		return s[2:], nil
	case c == '@':
		if len(s) < 2 || (s[1] != '-' && !isDigit(s[1])) {
			return "", errors.New("invalid date")
		}
		rest, err := skipNumber(s[1:])
		if err == nil && strings.Contains(s[1:len(s)-len(rest)], ".") {
			return "", errors.New("invalid date")
		}
		return rest, err
	case c == '%':
		return skipDisplayString(s)
	}
	return "", fmt.Errorf("unexpected character %q", s[0])
}

func skipNumber(s string) (string, error) {
	i := 0
	if s[0] == '-' {
		i++
	}
	start, dot := i, -1
	for i < len(s) && (isDigit(s[i]) || (s[i] == '.' && dot < 0)) {
		if s[i] == '.' {
			dot = i
		}
		i++
	}
	digits := i - start
	switch {
	case digits == 0 || s[start] == '.':
		return "", errors.New("invalid number")
	case dot < 0 && digits > 15:
		return "", errors.New("integer too long")
	case dot >= 0 && (dot-start > 12 || i-dot-1 < 1 || i-dot-1 > 3):
		return "", errors.New("invalid decimal")
	}
	return s[i:], nil
}

func skipDisplayString(s string) (string, error) {
	if len(s) < 2 || s[1] != '"' {
		return "", errors.New("invalid display string")
	}
	// RFC 9651 4.2.10: printable ASCII (a backslash is an ordinary character) and lowercase %-escapes,
	// which together must decode to valid UTF-8.
	var decoded []byte
	for i := 2; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			if !utf8.Valid(decoded) {
				return "", errors.New("display string is not UTF-8")
			}
			return s[i+1:], nil
		case c == '%':
			if i+2 >= len(s) || !isLCHex(s[i+1]) || !isLCHex(s[i+2]) {
				return "", errors.New("invalid percent escape in display string")
			}
			b, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			decoded = append(decoded, byte(b))
			i += 2
		case c < 0x20 || c > 0x7e:
			return "", errors.New("invalid character in display string")
		default:
			decoded = append(decoded, c)
		}
	}
	return "", errors.New("unterminated display string")
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || (c >= 'A' && c <= 'Z') }
func isLCHex(c byte) bool   { return isDigit(c) || (c >= 'a' && c <= 'f') }
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
