package inbox

import "context"

// Observer is told about the receive calls of a Client, for metrics and tracing (package metrics
// implements it, and [seen.Observer] too). Its methods must be fast and safe for concurrent use.
type Observer interface {
	// ReceiveStart is called when a Receive, ReceiveTx, ReceiveMany or ReceiveManyTx call starts, with
	// its messages (which it must not modify). It returns the context the call runs with (carrying a
	// span, say) and a function called once when the call returns, with its receipts (nil when err is
	// not nil) and error.
	ReceiveStart(ctx context.Context, msgs []Message) (context.Context, func(rs []Receipt, err error))
}
