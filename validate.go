package txinbox

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
)

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)
	schemaRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

// ValidateSchema returns a *[ConfigError] (Field "Store.Schema") unless schema is a plain identifier:
// a letter or underscore, then letters, digits or underscores, at most 63 bytes. (It is quoted with
// pgx.Identifier anyway; the rule keeps names that need quoting, and would surprise an operator,
// out.)
func ValidateSchema(schema string) error {
	if !schemaRE.MatchString(schema) {
		return &ConfigError{Field: "Store.Schema", Reason: fmt.Sprintf("%q is not a plain identifier (letters, digits, underscores; at most 63 bytes; not starting with a digit)", schema)}
	}
	return nil
}

// ValidateName checks a consumer or kind name: 1 to 128 bytes of letters, digits and _ . : / -,
// starting with a letter or digit.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q must be 1 to 128 letters, digits or _.:/- starting with a letter or digit", truncate(name))
	}
	return nil
}

// ValidateKey checks an idempotency key: 1 to 512 bytes of valid UTF-8 with no control
// characters.
func ValidateKey(key string) error { return textcheck.Check(key, limits.KeyBytes, false) }

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
