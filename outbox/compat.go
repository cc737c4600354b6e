package outbox

import "github.com/txinbox/txinbox"

// Forwarding names for the adapters module, removed once it is updated.

// Permanent is txinbox.Permanent.
//
// Deprecated: moved to txinbox.Permanent; removed once the adapters module is updated.
var Permanent = txinbox.Permanent

// IsPermanent is txinbox.IsPermanent.
//
// Deprecated: moved to txinbox.IsPermanent; removed once the adapters module is updated.
var IsPermanent = txinbox.IsPermanent

// OutcomeSent, OutcomeRetry and OutcomeDead are txinbox's.
//
// Deprecated: moved to txinbox.OutcomeSent, txinbox.OutcomeRetry and txinbox.OutcomeDead; removed
// once the adapters module is updated.
const (
	OutcomeSent  = txinbox.OutcomeSent
	OutcomeRetry = txinbox.OutcomeRetry
	OutcomeDead  = txinbox.OutcomeDead
)
