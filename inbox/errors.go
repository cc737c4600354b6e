package inbox

import (
	"errors"
	"fmt"
)

// ErrInvalidMessage is matched (errors.Is) by every *ValidationError: the message was rejected before
// anything was written.
var ErrInvalidMessage = errors.New("txinbox: invalid message")

// ErrKeyConflict is matched (errors.Is) by every *KeyConflictError: the idempotency key is already
// stored for the consumer with a different kind or payload.
var ErrKeyConflict = errors.New("txinbox: idempotency key reused with a different payload")

// ValidationError says which message (Index, in a batch) and which field was rejected, and why.
// Nothing of the call that returned it was written.
type ValidationError struct {
	Index  int    // position in the batch; 0 for a single message
	Field  string // "consumer", "key", "kind", "payload", "headers", "ordering_key"
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("txinbox: invalid message %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidMessage.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidMessage }

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
