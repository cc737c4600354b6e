package worker

import "github.com/txinbox/txinbox"

// Forwarding names for the adapters module, removed once it is updated.

// BackoffFunc is txinbox.BackoffFunc.
//
// Deprecated: moved to txinbox.BackoffFunc; removed once the adapters module is updated.
type BackoffFunc = txinbox.BackoffFunc
