package inbox

import "github.com/txinbox/txinbox"

// Forwarding names for the adapters module, removed once it is updated.

// ErrInvalidMessage is txinbox.ErrInvalidMessage.
//
// Deprecated: moved to txinbox.ErrInvalidMessage; removed once the adapters module is updated.
var ErrInvalidMessage = txinbox.ErrInvalidMessage

// DefaultMaxPayloadBytes is Config.MaxPayloadBytes's default: 1 MiB.
//
// Deprecated: Config.MaxPayloadBytes documents its default; removed once the adapters module is
// updated.
const DefaultMaxPayloadBytes = defaultMaxPayloadBytes
