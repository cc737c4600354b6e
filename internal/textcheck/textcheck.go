// Package textcheck checks text that txinbox stores in a text column (an idempotency key, a header,
// an ordering key, an outbox topic). It is the rule behind txinbox.ValidateKey and the packages'
// own limits, kept out of the public API.
package textcheck

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check returns an error unless s is at most maxBytes bytes of valid UTF-8 with no control
// characters (which also excludes NUL, which PostgreSQL text cannot hold), and not empty unless
// allowEmpty. The error's text completes a sentence whose subject is the value ("is not valid
// UTF-8").
func Check(s string, maxBytes int, allowEmpty bool) error {
	switch {
	case s == "" && !allowEmpty:
		return errors.New("must not be empty")
	case len(s) > maxBytes:
		return fmt.Errorf("is %d bytes, more than the limit of %d", len(s), maxBytes)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("contains control character %U at byte %d", r, i)
		}
	}
	return nil
}

// IsEventID reports whether s has the form of an outbox event's event id (admin.OutboxEvent.EventID,
// the CloudEvents id a consumer sees): a UUID in its text form, 32 hexadecimal digits (either case)
// in groups of 8, 4, 4, 4 and 12 joined by hyphens.
func IsEventID(s string) bool {
	ok := len(s) == 36
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			ok = c == '-'
		} else {
			ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
		}
	}
	return ok
}
