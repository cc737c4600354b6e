package inbox

import (
	"context"

	"github.com/txinbox/txinbox/internal/sqlc"
)

// Observer is told about the receive calls of a Client, for metrics and tracing (package metrics
// implements it). Its methods must be fast and safe for concurrent use.
type Observer interface {
	// ReceiveStart is called when a Receive, ReceiveTx, ReceiveMany or ReceiveManyTx call starts, with
	// its messages (which it must not modify). It returns the context the call runs with (carrying a
	// span, say) and a function called once when the call returns, with its receipts (nil when err is
	// not nil) and error.
	ReceiveStart(ctx context.Context, msgs []Message) (context.Context, func(rs []Receipt, err error))
}

// receive runs receiveMessages, reporting the call to the Observer if there is one.
func (c *Client) receive(ctx context.Context, db sqlc.DBTX, msgs []Message) ([]Receipt, error) {
	if c.cfg.Observer == nil {
		return c.receiveMessages(ctx, db, msgs)
	}
	ctx, end := c.cfg.Observer.ReceiveStart(ctx, msgs)
	rs, err := c.receiveMessages(ctx, db, msgs)
	if err != nil {
		end(nil, err)
	} else {
		end(rs, nil)
	}
	return rs, err
}
