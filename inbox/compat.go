package inbox

import "github.com/txinbox/txinbox"

// Forwarding names for the adapters module, removed once it is updated.

// Deprecated: moved to txinbox.ErrInvalidMessage; removed once the adapters module is updated.
var ErrInvalidMessage = txinbox.ErrInvalidMessage

// Deprecated: Config.MaxPayloadBytes documents its default (1 MiB); removed once the adapters module
// is updated.
const DefaultMaxPayloadBytes = defaultMaxPayloadBytes
