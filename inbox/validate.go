package inbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"unicode"
	"unicode/utf8"
)

// Limits applied to every message. Keys and names are stored as text: they must be valid UTF-8 without
// control characters (which also excludes NUL, which PostgreSQL text cannot hold).
const (
	// MaxKeyBytes is the longest idempotency key accepted, in bytes.
	MaxKeyBytes = 512
	// MaxOrderingKeyBytes is the longest ordering key accepted, in bytes.
	MaxOrderingKeyBytes = 512
	// DefaultMaxPayloadBytes is Config.MaxPayloadBytes when it is zero: 1 MiB.
	DefaultMaxPayloadBytes = 1 << 20
	// DefaultSchema is Config.Schema when it is empty.
	DefaultSchema = "public"
)

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)
	schemaRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

// ValidateSchema returns a *ConfigError unless schema is a plain identifier: a letter or underscore,
// then letters, digits or underscores, at most 63 bytes. (It is quoted with pgx.Identifier anyway;
// the rule keeps names that need quoting, and would surprise an operator, out.)
func ValidateSchema(schema string) error {
	if !schemaRE.MatchString(schema) {
		return &ConfigError{Field: "Schema", Reason: fmt.Sprintf("%q is not a plain identifier (letters, digits, underscores; at most 63 bytes; not starting with a digit)", schema)}
	}
	return nil
}

// ValidateName checks a consumer or kind name: 1 to 128 bytes of letters, digits and _ . : / -,
// starting with a letter or digit.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("must not be empty")
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q must be 1 to 128 letters, digits or _.:/- starting with a letter or digit", truncate(name))
	}
	return nil
}

// ValidateKey checks an idempotency key: 1 to MaxKeyBytes bytes of valid UTF-8 with no control
// characters.
func ValidateKey(key string) error { return validateText(key, MaxKeyBytes, false) }

func validateText(s string, maxBytes int, allowEmpty bool) error {
	switch {
	case s == "" && !allowEmpty:
		return fmt.Errorf("must not be empty")
	case len(s) > maxBytes:
		return fmt.Errorf("is %d bytes, more than the limit of %d", len(s), maxBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("is not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("contains control character %U at byte %d", r, i)
		}
	}
	return nil
}

// validatePayload checks that payload can be stored in a jsonb column: valid JSON, valid UTF-8, no
// \u0000 escape (jsonb cannot hold NUL), within maxBytes.
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
	case hasNULEscape(payload):
		return fmt.Errorf(`contains \u0000, which PostgreSQL jsonb cannot store`)
	}
	return nil
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

func validateHeaders(h map[string]string) error {
	for k, v := range h {
		if err := validateText(k, 256, false); err != nil {
			return fmt.Errorf("name %q %v", truncate(k), err)
		}
		if err := validateText(v, 8192, true); err != nil {
			return fmt.Errorf("%q value %v", truncate(k), err)
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
