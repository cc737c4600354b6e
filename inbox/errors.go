package inbox

import (
	"errors"
	"fmt"
)

// ErrKeyConflict is matched (errors.Is) by every *KeyConflictError: the idempotency key is already
// stored for the consumer with a different kind or payload.
var ErrKeyConflict = errors.New("txinbox: idempotency key reused with a different payload")

// KeyConflictError reports a key that is stored with another fingerprint (kind and payload). The
// stored row is left unchanged.
type KeyConflictError struct {
	Consumer string
	Key      string
	ID       int64 // the stored message
}

func (e *KeyConflictError) Error() string {
	return fmt.Sprintf("txinbox: key %q of consumer %q is stored (message %d) with a different kind or payload", e.Key, e.Consumer, e.ID)
}

// Is reports whether target is ErrKeyConflict.
func (e *KeyConflictError) Is(target error) bool { return target == ErrKeyConflict }
