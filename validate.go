package txinbox

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)

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
