package idempotency

import "errors"

// InvalidKeyReason returns why ParseKey rejected a value, from its error err, or "" if err is not
// ParseKey's.
func InvalidKeyReason(err error) string {
	var e *invalidKeyError
	if errors.As(err, &e) {
		return e.reason
	}
	return ""
}
