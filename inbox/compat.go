package inbox

import "github.com/txinbox/txinbox"

// Forwarding names for the adapters module, removed once it is updated.

// Deprecated: moved to txinbox.ErrInvalidMessage; removed once the adapters module is updated.
var ErrInvalidMessage = txinbox.ErrInvalidMessage
