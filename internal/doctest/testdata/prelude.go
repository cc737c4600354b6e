package snippet

// The declarations that the Go blocks of README.md and docs/*.md use without showing them. Every
// block that is not a complete file is compiled in a package with this file (see package doctest);
// the imports of both files are added by the test.

// OrderPaid is the payload of kind "OrderPaid" (the quick start's).
type OrderPaid struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// OrderRefunded is the payload of kind "OrderRefunded" (the quick start's).
type OrderRefunded struct {
	OrderID string `json:"order_id"`
}

// Payment is a payload carrying its own business key.
type Payment struct {
	PaymentID string `json:"payment_id"`
	Cents     int64  `json:"cents"`
}

// Customer is a payload carrying a version number and an e-mail address.
type Customer struct {
	ID      string `json:"id"`
	Email   string `json:"email"`
	Version int64  `json:"version"`
}

// mailer is a service outside the database that deduplicates by key.
var mailer interface {
	Send(key, email string) error
}

// creditOrder is a handler of OrderPaid.
func creditOrder(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderPaid]) error {
	_, err := tx.Exec(ctx, `INSERT INTO credits (order_id, cents) VALUES ($1, $2)`, m.Payload.OrderID, m.Payload.AmountCents)
	return err
}

// requireOperator is a service's own authentication.
func requireOperator(h http.Handler) http.Handler { return h }
